"""``/etc/gpuprov/mig-layout.json`` (schema ``gpuprov.mig-layout/v1``): the MIG state a host keeps.

One typed model for both directions and both sides: the deploy writes ``render(plan)``, verify
runs ``check(plan, files)``, and the host agent (``gpuprov/agent/layout.py``) parses the file with
the same ``parse`` before it touches a GPU. Stdlib only: this module ships in the agent bundle.

``parse`` enforces the rules that need no GPU: the schema, unknown keys, types, one entry per GPU
index, instances only on a MIG GPU, profile names of the ``Ng.Mgb`` form and no two GPU instances
of one GPU sharing a memory slot. The rules that depend on the GPU model (profile ids, names,
placements, compute slices) are asked of NVML by the agent (``gpuprov/agent/rules.py``).

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
gpuprov.hostfiles.mig_layout.LayoutError: gpus[0]: 4g.40gb at slots 0-3 overlaps 3g.40gb at slots 0-3
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuprov.contract import MIG_LAYOUT_PATH, MIG_LAYOUT_SCHEMA
from gpuprov.findings import Finding
from gpuprov.hostfiles import Wanted
from gpuprov.mig.instance import Instance

if TYPE_CHECKING:  # the agent never needs the plan; the bundle check skips this import
    from gpuprov.plan import HostPlan

CHECK = "mig-layout"
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


def from_plan(plan: HostPlan) -> MigLayout:
    """The layout ``plan`` wants on its host; every GPU MIG off outside ``mig``."""
    mig = plan.mode == "mig"
    return MigLayout(
        gpus=tuple(
            GpuLayout(g.index, g.mig_enabled and mig, tuple(g.instances) if mig else ())
            for g in sorted(plan.gpus, key=lambda g: g.index)
        ),
        gpu_clients=tuple(plan.settings["gpu_clients"]),
        allow_reboot=bool(plan.settings["mig_reboot"]),
    )


def paths(plan: HostPlan) -> Wanted:
    """The files the probe must read for ``check``: the layout on every host (a leftover counts)."""
    return Wanted(files=(MIG_LAYOUT_PATH,))


def render(plan: HostPlan) -> str:
    """The text of mig-layout.json that the deploy writes on a host in ``mig``."""
    return from_plan(plan).text()


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


def leftover(plan: HostPlan, path: str, found: object) -> list[Finding]:
    """The finding for a MIG-host file (``path``, read as ``found``) on a host outside ``mig``.

    >>> leftover(plan, MIG_LAYOUT_PATH, None)                   # doctest: +SKIP
    []
    """
    if found is None:
        return []
    return [
        Finding(
            plan.name,
            None,
            "leftover",
            f"no {path} (not a MIG host)",
            "present",
            "run the deploy (it disables the boot unit and removes the file)",
        )
    ]


def check(plan: HostPlan, files: dict[str, Any]) -> list[Finding]:
    """Findings for the layout file a host has (``files`` as the probe read them).

    A stale file is drift a reboot would expose (the boot unit applies it), so every field is
    compared: each GPU's mode and instances, ``gpu_clients`` and ``allow_reboot``.
    """
    text = files.get(MIG_LAYOUT_PATH)
    host = plan.name
    if plan.mode != "mig":
        return leftover(plan, MIG_LAYOUT_PATH, text)
    hint = "run the deploy (the boot unit would apply the old layout)"
    if text is None:
        # Not written yet (the deploy has not run the MIG step); the MIG state itself is compared
        # GPU by GPU from NVML, so an absent file hides nothing that is running.
        return []
    if not isinstance(text, str):  # the probe's {"error": why} marker
        why = f"not read: {_marker(text)}"
        return [Finding(host, None, CHECK, f"the planned layout in {MIG_LAYOUT_PATH}", why, hint)]
    try:
        found = loads(text)
    except LayoutError as e:
        return [
            Finding(
                host,
                None,
                CHECK,
                f"a valid {MIG_LAYOUT_SCHEMA} document in {MIG_LAYOUT_PATH}",
                _one_line(str(e)),
                f"fix or remove {MIG_LAYOUT_PATH}, then run the deploy",
            )
        ]
    want = from_plan(plan)
    out = []
    saved = {g.index: g for g in found.gpus}
    for gpu in want.gpus:
        entry = saved.pop(gpu.index, None)
        if entry is None or _gpu_key(entry) != _gpu_key(gpu):
            out.append(
                Finding(
                    host,
                    gpu.index,
                    CHECK,
                    _gpu_text(gpu),
                    "no entry" if entry is None else _gpu_text(entry),
                    hint,
                )
            )
    for extra in saved.values():
        out.append(
            Finding(
                host, extra.index, CHECK, "no entry (not a planned GPU)", _gpu_text(extra), hint
            )
        )
    if found.gpu_clients != want.gpu_clients:
        out.append(
            Finding(
                host,
                None,
                CHECK,
                f"gpu_clients {list(want.gpu_clients)}",
                f"gpu_clients {list(found.gpu_clients)}",
                hint,
            )
        )
    if found.allow_reboot != want.allow_reboot:
        out.append(
            Finding(
                host,
                None,
                CHECK,
                f"allow_reboot {json.dumps(want.allow_reboot)}",
                f"allow_reboot {json.dumps(found.allow_reboot)}",
                hint,
            )
        )
    return out


def slots_text(start: int, size: int) -> str:
    """Memory slots as people read them: ``slot 6`` or ``slots 4-7``."""
    return f"slot {start}" if size == 1 else f"slots {start}-{start + size - 1}"


def _gpu_key(gpu: GpuLayout) -> tuple:
    return gpu.mig_enabled, sorted(
        (i.profile_id, i.profile, i.start, i.size) for i in gpu.instances
    )


def _gpu_text(gpu: GpuLayout) -> str:
    if not gpu.mig_enabled:
        return "MIG disabled"
    shown = ", ".join(
        f"{i.profile} (id {i.profile_id}) at {slots_text(i.start, i.size)}"
        for i in sorted(gpu.instances)
    )
    return f"MIG enabled: {shown or 'no instances'}"


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


def _marker(value: Any) -> str:
    """The reason in a probe's ``{"error": why}`` marker (anything else, shown safely)."""
    return str(value.get("error")) if isinstance(value, dict) else _shown(value)


def _one_line(text: str) -> str:
    return text.replace("\n", " ")
