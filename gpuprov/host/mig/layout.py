"""``/etc/gpuprov/mig-layout.json`` (schema ``gpuprov.mig-layout/v1``): the MIG state a host keeps.

One typed model of the file for both sides: the deploy writes it from the plan and verify checks
it (``gpuprov/core/hostfiles/mig_layout.py``), and the applier reads it here, at deploy time and
at every boot, with the same ``parse``, so a hand edit is parsed and checked exactly as verify
parses it. The read is the probe's bounded one (``gpuprov.host.files``): a layout is a few KiB,
and a wrong path (a FIFO, a device, a huge file) is refused, not read.

``parse`` enforces the rules that need no GPU: the schema, unknown keys, types, one entry per GPU
index, instances only on a MIG GPU, profile names of the ``Ng.Mgb`` form and no two GPU instances
of one GPU sharing a memory slot. The rules that depend on the GPU model (profile ids, names,
placements, compute slices) are asked of NVML by the agent (``gpuprov/host/mig/rules.py``).

>>> layout = parse({"schema": "gpuprov.mig-layout/v1", "gpus": [{"index": 0,
...     "mig_enabled": True, "instances": [{"profile": "7g.80gb", "profile_id": 0, "start": 0,
...     "size": 8}]}], "gpu_clients": ["nvidia-persistenced"], "allow_reboot": False})
>>> layout.gpus[0].instances[0].profile, layout.gpu_clients
('7g.80gb', ('nvidia-persistenced',))
>>> parse({"schema": "gpuprov.mig-layout/v1", "gpus": [{"index": 0, "mig_enabled": True,
...     "instances": [{"profile": "3g.40gb", "profile_id": 9, "start": 0, "size": 4},
...                   {"profile": "4g.40gb", "profile_id": 5, "start": 0, "size": 4}]}]})
Traceback (most recent call last):
  ...
gpuprov.host.mig.layout.LayoutError: gpus[0]: 4g.40gb at slots 0-3 overlaps 3g.40gb at slots 0-3
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuprov.host.contract import MIG_LAYOUT_SCHEMA
from gpuprov.host.files import read_file
from gpuprov.host.mig.instance import Instance

# Integer keys -> their bound. Far above any real GPU (8 memory slots, at most 7 GIs, profile
# ids below 100 so far); they keep a hostile file cheap to check.
_INSTANCE_INTS = {"profile_id": 1 << 16, "start": 64, "size": 64}
_MAX_SLOT = 64
_MAX_INSTANCES = 64


class LayoutError(ValueError):
    """The layout does not follow the schema or the GPU-independent MIG rules; says where."""


@dataclass(frozen=True)
class GpuLayout:
    """One GPU of the layout: its MIG mode and its GPU instances at exact placements."""

    index: int
    mig_enabled: bool
    instances: tuple[Instance, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "mig_enabled": self.mig_enabled,
            "instances": [i.as_dict() for i in self.instances],
        }


@dataclass(frozen=True)
class MigLayout:
    """The planned MIG state of one host, GPUs sorted by index."""

    gpus: tuple[GpuLayout, ...]
    gpu_clients: tuple[str, ...] = ()
    allow_reboot: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": MIG_LAYOUT_SCHEMA,
            "gpus": [g.as_dict() for g in self.gpus],
            "gpu_clients": list(self.gpu_clients),
            "allow_reboot": self.allow_reboot,
        }

    def text(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"


def loads(text: str) -> MigLayout:
    """Parse the file's text; LayoutError when it is not JSON or not the schema."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise LayoutError(f"not JSON: {e}") from None
    return parse(raw)


def parse(raw: Any) -> MigLayout:
    """Check a decoded layout document and return its model."""
    _keys(
        raw, "the document", required={"schema", "gpus"}, optional={"gpu_clients", "allow_reboot"}
    )
    if raw["schema"] != MIG_LAYOUT_SCHEMA:
        raise LayoutError(f"schema is {raw['schema']!r:.60}, expected {MIG_LAYOUT_SCHEMA!r}")
    clients = raw.get("gpu_clients", [])
    if not isinstance(clients, list) or not all(_unit_name(c) for c in clients):
        raise LayoutError("gpu_clients must be a list of systemd unit names")
    allow_reboot = raw.get("allow_reboot", False)
    if not isinstance(allow_reboot, bool):
        raise LayoutError("allow_reboot must be true or false")
    if not isinstance(raw["gpus"], list):
        raise LayoutError("gpus must be a list")
    gpus = [_gpu(g, n) for n, g in enumerate(raw["gpus"])]
    indices = [g.index for g in gpus]
    if len(set(indices)) != len(indices):
        raise LayoutError(f"a GPU index appears twice in gpus: {indices}")
    return MigLayout(tuple(sorted(gpus, key=lambda g: g.index)), tuple(clients), allow_reboot)


def slots_text(start: int, size: int) -> str:
    """Memory slots as people read them: ``slot 6`` or ``slots 4-7``."""
    return f"slot {start}" if size == 1 else f"slots {start}-{start + size - 1}"


def _gpu(raw: Any, n: int) -> GpuLayout:
    where = f"gpus[{n}]"
    _keys(raw, where, required={"index", "mig_enabled", "instances"}, optional=set())
    if not _is_int(raw["index"]) or not 0 <= raw["index"] < _MAX_SLOT:
        raise LayoutError(f"{where}.index must be a GPU index (an integer 0-{_MAX_SLOT - 1})")
    if not isinstance(raw["mig_enabled"], bool):
        raise LayoutError(f"{where}.mig_enabled must be true or false")
    if not isinstance(raw["instances"], list):
        raise LayoutError(f"{where}.instances must be a list")
    if raw["instances"] and not raw["mig_enabled"]:
        raise LayoutError(f"{where} lists instances but has mig_enabled false")
    if len(raw["instances"]) > _MAX_INSTANCES:
        raise LayoutError(f"{where} lists {len(raw['instances'])} instances; a GPU has far fewer")
    instances = tuple(
        _instance(i, f"{where}.instances[{k}]") for k, i in enumerate(raw["instances"])
    )
    _no_overlap(instances, where)
    return GpuLayout(raw["index"], raw["mig_enabled"], instances)


def _instance(raw: Any, where: str) -> Instance:
    _keys(raw, where, required={"profile", *_INSTANCE_INTS}, optional=set())
    for key, bound in _INSTANCE_INTS.items():
        if not (_is_int(raw[key]) and 0 <= raw[key] < bound):
            raise LayoutError(f"{where}.{key} must be an integer 0-{bound - 1}")
    if not isinstance(raw["profile"], str):
        raise LayoutError(f"{where}.profile must be a string")
    if raw["size"] < 1:
        raise LayoutError(f"{where}.size must be at least 1")
    instance = Instance(raw["start"], raw["size"], raw["profile"], raw["profile_id"])
    try:
        instance.compute_slices  # noqa: B018 -- the name must say how many slices it has
    except ValueError:
        raise LayoutError(
            f"{where}.profile {_shown(raw['profile'])} is not a GPU instance profile name "
            "(Ng.Mgb, e.g. 3g.40gb)"
        ) from None
    return instance


def _no_overlap(instances: tuple[Instance, ...], where: str) -> None:
    taken: dict[int, Instance] = {}
    for instance in instances:
        for slot in range(instance.start, instance.start + instance.size):
            other = taken.get(slot)
            if other is not None:
                raise LayoutError(
                    f"{where}: {instance.profile} at {slots_text(instance.start, instance.size)} "
                    f"overlaps {other.profile} at {slots_text(other.start, other.size)}"
                )
            taken[slot] = instance


def _keys(raw: Any, where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(raw, dict):
        raise LayoutError(f"{where} must be a JSON object")
    missing = sorted(required - raw.keys())
    unknown = sorted(raw.keys() - required - optional)
    if missing:
        raise LayoutError(f"{where} lacks {', '.join(missing)}")
    if unknown:
        raise LayoutError(
            f"{where} has unknown key(s) {', '.join(_shown(k) for k in unknown)}; "
            f"allowed: {', '.join(sorted(required | optional))}"
        )


def _unit_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256 and value.isprintable()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """A value from the file, printed safely: plain when it is a short printable word, else its
    repr (control characters escaped), cut when long."""
    plain = isinstance(value, str) and value.isprintable() and " " not in value
    text = value if plain else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load(path: str) -> MigLayout:
    """Parse the layout file at ``path``; raises LayoutError naming the file.

    >>> load("/etc/gpuprov/mig-layout.json").gpus[0].mig_enabled    # doctest: +SKIP
    True
    """
    text = read_file(path)
    if text is None:
        raise LayoutError(f"{path}: cannot read the MIG layout: no such file")
    if isinstance(text, dict):
        raise LayoutError(f"{path}: cannot read the MIG layout: {text['error']}")
    try:
        return loads(text)
    except LayoutError as e:
        raise LayoutError(f"{path}: {e}") from None
