"""Read and check ``/etc/gpuprov/mig-layout.json`` (schema ``gpuprov.mig-layout/v1``).

The deploy writes the file from the plan; the applier reads it on the host, at deploy time and at
every boot. Unknown keys are errors (a typo must not silently mean "default"). Stdlib only.

>>> layout = parse({"schema": "gpuprov.mig-layout/v1", "gpus": [{"index": 0,
...     "mig_enabled": True, "instances": [{"profile": "7g.80gb", "profile_id": 0, "start": 0,
...     "size": 8}]}], "gpu_clients": ["nvidia-persistenced"], "allow_reboot": False})
>>> layout.gpus[0]["instances"][0]["profile"], layout.gpu_clients
('7g.80gb', ('nvidia-persistenced',))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuprov.contract import MIG_LAYOUT_SCHEMA

_INSTANCE_KEYS = {"profile": str, "profile_id": int, "start": int, "size": int}


class LayoutError(Exception):
    """The layout file is missing or does not follow the schema; the message says where."""


@dataclass(frozen=True)
class Layout:
    """The planned MIG state of one host; ``gpus`` are mig-layout.json GPU dicts, by index."""

    gpus: tuple[dict[str, Any], ...]
    gpu_clients: tuple[str, ...]
    allow_reboot: bool


def load(path: str) -> Layout:
    """Parse the layout file at ``path``; raises LayoutError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as e:
        raise LayoutError(f"{path}: cannot read the MIG layout: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise LayoutError(f"{path}: not JSON: {e}") from None
    try:
        return parse(raw)
    except LayoutError as e:
        raise LayoutError(f"{path}: {e}") from None


def parse(raw: Any) -> Layout:
    """Check a decoded layout document and return it as a Layout."""
    _keys(
        raw, "the document", required={"schema", "gpus"}, optional={"gpu_clients", "allow_reboot"}
    )
    if raw["schema"] != MIG_LAYOUT_SCHEMA:
        raise LayoutError(f"schema is {raw['schema']!r}, expected {MIG_LAYOUT_SCHEMA!r}")
    clients = raw.get("gpu_clients", [])
    if not isinstance(clients, list) or not all(isinstance(c, str) and c for c in clients):
        raise LayoutError("gpu_clients must be a list of systemd unit names")
    allow_reboot = raw.get("allow_reboot", False)
    if not isinstance(allow_reboot, bool):
        raise LayoutError("allow_reboot must be true or false")
    if not isinstance(raw["gpus"], list):
        raise LayoutError("gpus must be a list")
    gpus = tuple(_gpu(g, n) for n, g in enumerate(raw["gpus"]))
    indices = [g["index"] for g in gpus]
    if len(set(indices)) != len(indices):
        raise LayoutError(f"a GPU index appears twice in gpus: {indices}")
    return Layout(tuple(sorted(gpus, key=lambda g: g["index"])), tuple(clients), allow_reboot)


def _gpu(raw: Any, n: int) -> dict[str, Any]:
    where = f"gpus[{n}]"
    _keys(raw, where, required={"index", "mig_enabled", "instances"}, optional=set())
    if not _is_int(raw["index"]) or raw["index"] < 0:
        raise LayoutError(f"{where}.index must be a GPU index (an integer >= 0)")
    if not isinstance(raw["mig_enabled"], bool):
        raise LayoutError(f"{where}.mig_enabled must be true or false")
    if not isinstance(raw["instances"], list):
        raise LayoutError(f"{where}.instances must be a list")
    if raw["instances"] and not raw["mig_enabled"]:
        raise LayoutError(f"{where} lists instances but has mig_enabled false")
    for i, instance in enumerate(raw["instances"]):
        place = f"{where}.instances[{i}]"
        _keys(instance, place, required=set(_INSTANCE_KEYS), optional=set())
        for key, kind in _INSTANCE_KEYS.items():
            if kind is int and not (_is_int(instance[key]) and instance[key] >= 0):
                raise LayoutError(f"{place}.{key} must be an integer >= 0")
            if kind is str and not isinstance(instance[key], str):
                raise LayoutError(f"{place}.{key} must be a string")
    return raw


def _keys(raw: Any, where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(raw, dict):
        raise LayoutError(f"{where} must be a JSON object")
    missing = sorted(required - raw.keys())
    unknown = sorted(raw.keys() - required - optional)
    if missing:
        raise LayoutError(f"{where} lacks {', '.join(missing)}")
    if unknown:
        raise LayoutError(
            f"{where} has unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(required | optional))}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
