"""What a vgpu node's device plugin says it registered, in its Node annotation, against the plan.

Both flavours' plugins write, per GPU, the UUID, the share count, the memory and (HAMi) the
cores they hand out into an annotation of their Node, which their scheduler reads
(``VGPU_REGISTER_ANNOTATIONS``; formats measured with the real binaries,
../shared/reference/vgpu-plugins.md sections 6 and 7):

- HAMi v2.10.0, ``hami.io/node-nvidia-register``: a JSON list of ``DeviceInfo``
  (pkg/device/devices.go:127-144, written by pkg/device/nvidia/register.go:256-351). Every field
  is ``omitempty``, so an index of 0, a count of 0 or ``health: false`` is simply absent.
  ``devmem`` is the GPU's MiB x ``devicememoryscaling``, ``devcore`` 100 x ``devicecorescaling``.
- Volcano v1.12.0, ``volcano.sh/node-vgpu-register``: not JSON. One record per GPU,
  ``<UUID>,<count>,<MiB / gpuMemoryFactor>,NVIDIA-<name>,<true|false>,<mode>:``, concatenated
  (pkg/plugin/vgpu/register.go:37-92, pkg/plugin/vgpu/util/util.go:163-170). No cores: Volcano
  registers 100 per GPU with the kubelet (``volcano.sh/vgpu-cores``).

The plan's figures come from ``HostPlan.vgpu`` (``gpuprov.core.vgpu``): the split count and the
per-GPU memory and cores it advertises. Checked: one entry per planned GPU, each with a distinct
UUID, healthy, in HAMi-core mode (the node config reached the plugin: HAMi drops the mode when
it has no ``config.json``), with the planned count, memory and cores. A malformed annotation is
one finding, never an exception.

>>> parse("volcano", "GPU-1,10,5120,NVIDIA-NVIDIA A100,true,hami-core:")[0].memory
5120
>>> parse("hami", '[{"id": "GPU-1", "count": 4, "devmem": 100, "devcore": 100}]')[0].index
0
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import VGPU_OPERATING_MODE, VGPU_REGISTER_ANNOTATIONS, VGPU_RESOURCES

CHECK = "vgpu-register"
_HINT = (
    "node {node}: check the {flavour} device plugin on the host (running, reading this node's "
    "entry of the node config); it rewrites the annotation within 30 s of a restart"
)
_VOLCANO_FIELDS = 6  # uuid, count, memory, type, health, mode


class AnnotationError(ValueError):
    """The annotation is not in its plugin's format: what is wrong with it."""


@dataclass(frozen=True)
class RegisteredGpu:
    """One GPU as the plugin registered it. ``cores`` is None where the format has none
    (Volcano); ``index`` is the NVML index (HAMi) or the record's position (Volcano)."""

    uuid: str
    index: int
    count: int
    memory: int
    cores: int | None
    healthy: bool
    mode: str


def parse(flavour: str, text: str) -> list[RegisteredGpu]:
    """The GPUs in ``flavour``'s register annotation ``text``; AnnotationError if malformed."""
    return _parse_hami(text) if flavour == "hami" else _parse_volcano(text)


def _parse_hami(text: str) -> list[RegisteredGpu]:
    try:
        entries = json.loads(text)
    except ValueError as e:
        raise AnnotationError(f"not JSON ({e})") from None
    if not isinstance(entries, list):
        raise AnnotationError(f"a JSON {type(entries).__name__}, not a list")
    out = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise AnnotationError(f"entry {n} has no string id")
        numbers = {key: entry.get(key, 0) for key in ("index", "count", "devmem", "devcore")}
        for key, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise AnnotationError(f"entry {n}: {key} {value!r} is not an integer")
        health = entry.get("health", False)
        mode = entry.get("mode", "")
        if not isinstance(health, bool) or not isinstance(mode, str):
            raise AnnotationError(f"entry {n}: health {health!r} or mode {mode!r} mistyped")
        out.append(
            RegisteredGpu(
                entry["id"],
                numbers["index"],
                numbers["count"],
                numbers["devmem"],
                numbers["devcore"],
                health,
                mode,
            )
        )
    return sorted(out, key=lambda g: g.index)


def _parse_volcano(text: str) -> list[RegisteredGpu]:
    if not text.endswith(":"):
        raise AnnotationError("does not end with ':' (each record is colon-terminated)")
    out = []
    for n, record in enumerate(text[:-1].split(":")):
        fields = record.split(",")
        if len(fields) != _VOLCANO_FIELDS:
            raise AnnotationError(f"record {n} has {len(fields)} fields, not {_VOLCANO_FIELDS}")
        uuid, count, memory, _type, health, mode = fields
        if not (count.isdigit() and memory.isdigit()) or health not in ("true", "false"):
            raise AnnotationError(f"record {n} ({record!r}): count, memory or health malformed")
        out.append(RegisteredGpu(uuid, n, int(count), int(memory), None, health == "true", mode))
    return out


def check(plan: HostPlan, node: Mapping[str, Any], node_name: str) -> list[Finding]:
    """Findings for ``node`` (a Node object) of a vgpu ``plan``; [] for other hosts.

    >>> check(plan, {"metadata": {"annotations": {}}}, "n1")[0].found   # doctest: +SKIP
    'no annotation hami.io/node-nvidia-register'
    """
    if plan.vgpu is None:
        return []
    flavour = plan.vgpu.flavour
    key = VGPU_REGISTER_ANNOTATIONS[flavour]
    hint = _HINT.format(node=node_name, flavour=flavour)
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
    if not isinstance(text, str):
        return [_finding(plan, None, f"annotation {key}", f"no annotation {key}", hint)]
    try:
        gpus = parse(flavour, text)
    except AnnotationError as e:
        return [_finding(plan, None, f"annotation {key} as its plugin writes it", str(e), hint)]
    out = []
    if len(gpus) != plan.gpu_count:
        out.append(
            _finding(plan, None, f"{plan.gpu_count} GPUs in {key}", f"{len(gpus)} GPUs", hint)
        )
    uuids = [g.uuid for g in gpus]
    for uuid in sorted({u for u in uuids if uuids.count(u) > 1 or not u.startswith("GPU-")}):
        out.append(_finding(plan, None, "one distinct GPU-<uuid> per GPU", uuid, hint))
    expected = _expected(plan)
    for gpu in gpus:
        have = {"count": gpu.count, "memory": gpu.memory, "cores": gpu.cores, "mode": gpu.mode}
        for field, want in expected.items():
            if have[field] != want:
                out.append(
                    _finding(
                        plan,
                        gpu.index,
                        f"{gpu.uuid} {field}: {want}",
                        f"{gpu.uuid} {field}: {have[field]}",
                        hint,
                    )
                )
        if not gpu.healthy:
            out.append(_finding(plan, gpu.index, f"{gpu.uuid} healthy", "unhealthy", hint))
    return out


def _expected(plan: HostPlan) -> dict[str, Any]:
    """Per GPU: the planned count, memory, cores (None where the format has none) and mode."""
    assert plan.vgpu is not None
    _count, memory_name, cores_name = VGPU_RESOURCES[plan.vgpu.flavour]
    per_gpu = {name: total // plan.gpu_count for name, total in plan.vgpu.advertised.items()}
    return {
        "count": plan.vgpu.split_count,
        "memory": per_gpu[memory_name],
        "cores": per_gpu[cores_name] if plan.vgpu.flavour == "hami" else None,
        "mode": VGPU_OPERATING_MODE,
    }


def _finding(plan: HostPlan, gpu: int | None, expected: str, found: str, hint: str) -> Finding:
    return Finding(plan.name, gpu, CHECK, expected, found, hint)
