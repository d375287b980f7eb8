"""Which devices a change takes from running pods, and which pods hold them.

Pure: the plan's MIG actions (``gpuprov.host.mig.diff``, the agent's own diff), whether the
driver changes, the probe's GPUs and the kubelet's pod-resources rows (the probe's
``pod_resources`` section) in; the touched GPUs and the pods to evict out.

What a change touches, per GPU:

- a MIG mode change or a GPU reset: the whole GPU (its UUID and every MIG device on it);
- MIG instances destroyed: the MIG devices of those instances only (the instances kept on the
  same GPU, and those created, are no running pod's);
- a driver change (version or branch): every GPU;
- a time-slicing replica change, a config-only change, instances only created: nothing.

A device id as the kubelet records it is the one NVIDIA's device plugin registered
(k8s-device-plugin ``internal/rm/devices.go`` ``BuildDevice``: ``dev.ID = uuid``, whatever
``deviceIDStrategy`` says, which only changes what ``Allocate`` hands the container):

- a whole card: the GPU's NVML UUID, ``GPU-<uuid>`` (``nvmlDevice.GetUUID``,
  ``internal/rm/nvml_devices.go``);
- a MIG device: the MIG device's own NVML UUID, ``MIG-<uuid>`` (``nvmlMigDevice.GetUUID``, the
  same file; built per MIG device by ``buildMigDeviceMap`` in ``internal/rm/device_map.go``);
- a time-sliced or MPS share: ``<id>::<replica>`` of either (``NewAnnotatedID`` in
  ``devices.go``, one per replica in ``updateDeviceMapWithReplicas``).

>>> probe = {"gpus": [{"index": 5, "uuid": "GPU-5", "gpu_instances": [{"id": 0,
...     "profile": "7g.80gb", "start": 0, "compute_instances": [{"uuid": "MIG-a"}]}]}]}
>>> device_gpus(probe)
{'GPU-5': 5, 'MIG-a': 5}
>>> gpu_of("MIG-a::3", device_gpus(probe))
5
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprov.host.contract import REPLICA_ID_SEPARATOR
from gpuprov.host.mig.diff import MigActions


@dataclass(frozen=True)
class Touched:
    """One GPU a change touches: why, and the device UUIDs whose holders must go first."""

    index: int
    reason: str
    devices: frozenset[str]


@dataclass(frozen=True)
class Holder:
    """A pod the kubelet gave a touched device: its name, and the GPUs and devices it holds."""

    namespace: str
    pod: str
    gpus: tuple[int, ...]
    devices: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}"


def device_gpus(probe: Mapping[str, Any]) -> dict[str, int]:
    """Device UUID -> GPU index, for every GPU and MIG device the probe saw."""
    out: dict[str, int] = {}
    for gpu in probe.get("gpus") or ():
        if gpu.get("uuid"):
            out[gpu["uuid"]] = gpu["index"]
        for gi in gpu.get("gpu_instances") or ():
            for ci in gi.get("compute_instances") or ():
                if ci.get("uuid"):
                    out[ci["uuid"]] = gpu["index"]
    return out


def gpu_of(device_id: str, by_uuid: Mapping[str, int]) -> int | None:
    """The GPU of a kubelet device id (a replica's ``::<n>`` cut off); None: not a GPU here."""
    return by_uuid.get(device_id.partition(REPLICA_ID_SEPARATOR)[0])


def touched(
    probe: Mapping[str, Any], actions: Sequence[MigActions] | None, driver_change: bool
) -> list[Touched]:
    """The GPUs the change touches, by index, with the devices running pods must give back.

    >>> from gpuprov.host.mig.diff import MigActions, ObservedGi
    >>> probe = {"gpus": [{"index": 0, "uuid": "GPU-0"}, {"index": 5, "uuid": "GPU-5",
    ...     "gpu_instances": [{"id": 0, "profile": "7g.80gb", "start": 0,
    ...                        "compute_instances": [{"uuid": "MIG-a"}]}]}]}
    >>> seven = ObservedGi(0, 0, 0, 8, (7,), "7g.80gb")
    >>> touched(probe, [MigActions(5, None, False, (), (seven,), ())], False)
    [Touched(index=5, reason='MIG instances destroyed: 7g.80gb at 0', devices=frozenset({'MIG-a'}))]
    >>> [t.index for t in touched(probe, [], True)]
    [0, 5]
    """
    gpus = {gpu["index"]: gpu for gpu in probe.get("gpus") or ()}
    out: dict[int, Touched] = {}
    if driver_change:
        for index, gpu in gpus.items():
            out[index] = Touched(index, "driver change", frozenset(_all_devices(gpu)))
    for action in actions or ():
        if action.index in out:
            continue
        gpu = gpus.get(action.index, {"index": action.index})
        if action.mig_mode is not None or action.reset:
            why = "MIG mode change" if action.mig_mode is not None else "GPU reset"
            out[action.index] = Touched(action.index, why, frozenset(_all_devices(gpu)))
        elif action.destroy:
            gone = {gi.id for gi in action.destroy}
            devices = {
                ci["uuid"]
                for gi in gpu.get("gpu_instances") or ()
                if gi["id"] in gone
                for ci in gi.get("compute_instances") or ()
                if ci.get("uuid")
            }
            what = ", ".join(
                f"{gi.profile or gi.profile_id} at {gi.start}" for gi in action.destroy
            )
            out[action.index] = Touched(
                action.index, f"MIG instances destroyed: {what}", frozenset(devices)
            )
    return [out[i] for i in sorted(out)]


def taken(touched_gpus: Iterable[Touched]) -> frozenset[str]:
    """Every device the touched GPUs give up."""
    return frozenset(device for t in touched_gpus for device in t.devices)


def holders(
    rows: Iterable[Mapping[str, Any]], devices: Collection[str], by_uuid: Mapping[str, int]
) -> list[Holder]:
    """The pods whose containers the kubelet gave one of ``devices`` (pod-resources rows:
    ``namespace``, ``pod``, ``device_ids``), in the kubelet's order; each pod once.

    >>> rows = [{"namespace": "ml", "pod": "a", "device_ids": ["MIG-a"]},
    ...         {"namespace": "ml", "pod": "b", "device_ids": ["GPU-0::1"]}]
    >>> holders(rows, {"MIG-a"}, {"MIG-a": 5, "GPU-0": 0})
    [Holder(namespace='ml', pod='a', gpus=(5,), devices=('MIG-a',))]
    """
    found: dict[tuple[str, str], tuple[set[int], list[str]]] = {}
    for row in rows:
        for device in row.get("device_ids") or ():
            if device.partition(REPLICA_ID_SEPARATOR)[0] not in devices:
                continue
            gpus, held = found.setdefault((row["namespace"], row["pod"]), (set(), []))
            index = gpu_of(device, by_uuid)
            if index is not None:
                gpus.add(index)
            held.append(device)
    return [
        Holder(namespace, pod, tuple(sorted(gpus)), tuple(held))
        for (namespace, pod), (gpus, held) in found.items()
    ]


def described(touched_gpus: Sequence[Touched]) -> str:
    """The touched GPUs in one line, for the deploy's log.

    >>> described([Touched(5, "MIG mode change", frozenset())])
    'GPU 5 (MIG mode change)'
    """
    return "; ".join(f"GPU {t.index} ({t.reason})" for t in touched_gpus)


def _all_devices(gpu: Mapping[str, Any]) -> set[str]:
    return set(device_gpus({"gpus": [gpu]}))
