"""The kubelet's device-manager checkpoint, read: which devices each resource has registered.

The kubelet writes ``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`` (contract
``KUBELET_DEVICE_CHECKPOINT``) whenever a device plugin's device list changes. Its schema is the
Go struct ``checkpoint.Data`` in kubernetes
``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go`` (read in the v1.34.4 module source the
lab's kubelet is built from; https://github.com/kubernetes/kubernetes/blob/v1.34.4/pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go):
``{"Data": {"PodDeviceEntries": [...] | null, "RegisteredDevices": {resource: [ids]}},
"Checksum": uint32}``. ``RegisteredDevices`` holds the *healthy* devices of each resource
(``ManagerImpl.writeCheckpoint`` in ``devicemanager/manager.go``); ids are the plugin's
(``GPU-<uuid>::<replica>`` when time-sliced, ``MIG-<uuid>`` for MIG devices).

The checksum is FNV-32a over a go-spew dump of the Go value (``checkpointmanager/checksum``),
which only Go can reproduce: it is checked to be a uint32, not recomputed.

What the file does not say: a plugin that stopped keeps its devices here until the kubelet next
writes the file (the kubelet keeps a stopped plugin's resource for ``endpointStopGracePeriod``,
5 minutes, devicemanager/types.go), while ``status.allocatable`` drops to 0 within seconds. A
caller that must know the plugin is serving also looks for its socket in the same directory.

>>> registered_devices('{"Data": {"PodDeviceEntries": null, "RegisteredDevices":'
...     ' {"nvidia.com/gpu": ["GPU-b", "GPU-a"]}}, "Checksum": 12}')
{'nvidia.com/gpu': ['GPU-a', 'GPU-b']}
"""

from __future__ import annotations

import json

_UINT32 = 2**32


class CheckpointError(ValueError):
    """The checkpoint is not what the kubelet writes; the message says what is wrong."""


def _short(value: object) -> str:
    """``value`` for a message: an integer past 128 bits by its size (its digits cannot even be
    printed past 4300), anything else by its repr, cut."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:50] + "... (cut)"


def registered_devices(text: str) -> dict[str, list[str]]:
    """``{resource: sorted device ids}`` from the checkpoint's text; CheckpointError if malformed."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"not JSON: {e}") from None
    except RecursionError:
        raise CheckpointError("nested too deep to be the kubelet's checkpoint") from None
    except ValueError as e:  # an integer past Python's int-to-text limit (4300 digits)
        raise CheckpointError(f"not the kubelet's checkpoint: {str(e)[:120]}") from None
    if not isinstance(document, dict) or set(document) != {"Data", "Checksum"}:
        raise CheckpointError("expected an object with exactly the keys Data and Checksum")
    checksum = document["Checksum"]
    if isinstance(checksum, bool) or not isinstance(checksum, int) or not 0 <= checksum < _UINT32:
        raise CheckpointError(f"Checksum {_short(checksum)} is not a uint32")
    data = document["Data"]
    if not isinstance(data, dict) or set(data) != {"PodDeviceEntries", "RegisteredDevices"}:
        raise CheckpointError(
            "Data: expected exactly the keys PodDeviceEntries and RegisteredDevices"
        )
    if data["PodDeviceEntries"] is not None and not isinstance(data["PodDeviceEntries"], list):
        raise CheckpointError("Data.PodDeviceEntries: expected a list or null")
    registered = data["RegisteredDevices"]
    if registered is None:  # a nil Go map
        return {}
    if not isinstance(registered, dict):
        raise CheckpointError("Data.RegisteredDevices: expected an object")
    devices: dict[str, list[str]] = {}
    for resource, ids in registered.items():
        if ids is None:  # a nil Go slice
            ids = []
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise CheckpointError(
                f"Data.RegisteredDevices[{_short(resource)}]: expected a list of device ids"
            )
        if len(set(ids)) != len(ids):
            raise CheckpointError(
                f"Data.RegisteredDevices[{_short(resource)}]: a device id repeats"
            )
        devices[resource] = sorted(ids)
    return devices
