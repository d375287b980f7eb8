"""The device-manager checkpoint parser, on text a real kubelet v1.34.4 wrote in a lab host."""

from __future__ import annotations

import json
import re

import pytest

from gpuprov.host.kubelet.checkpoint import CheckpointError, registered_devices

# Written by the real kubelet after NVIDIA's device plugin v0.20.0 registered two simulated
# A100s time-sliced 4 ways (tests/test_kubelet_in_container.py makes the same).
WRITTEN_BY_KUBELET = (
    '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu.shared":['
    '"GPU-99d78cf4-664f-55ea-b44b-d8a3e8df2f4e::3","GPU-374ab0f2-9bc5-513d-93b9-0bf1b3279726::0",'
    '"GPU-374ab0f2-9bc5-513d-93b9-0bf1b3279726::1","GPU-374ab0f2-9bc5-513d-93b9-0bf1b3279726::2",'
    '"GPU-374ab0f2-9bc5-513d-93b9-0bf1b3279726::3","GPU-99d78cf4-664f-55ea-b44b-d8a3e8df2f4e::0",'
    '"GPU-99d78cf4-664f-55ea-b44b-d8a3e8df2f4e::1","GPU-99d78cf4-664f-55ea-b44b-d8a3e8df2f4e::2"]'
    '}},"Checksum":3764097439}'
)


def test_time_sliced_checkpoint_gives_each_replica_of_each_gpu_under_the_shared_resource():
    devices = registered_devices(WRITTEN_BY_KUBELET)
    assert list(devices) == ["nvidia.com/gpu.shared"]
    ids = devices["nvidia.com/gpu.shared"]
    assert len(ids) == 8
    assert ids[0] == "GPU-374ab0f2-9bc5-513d-93b9-0bf1b3279726::0"
    assert ids == sorted(ids)


def test_resource_whose_plugin_has_no_healthy_devices_reads_as_empty():
    text = (
        '{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{"nvidia.com/gpu":null}},"Checksum":0}'
    )
    assert registered_devices(text) == {"nvidia.com/gpu": []}


def test_kubelet_without_any_plugin_registered_reads_as_no_resources():
    text = '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1}'
    assert registered_devices(text) == {}


def _with(change) -> str:
    document = json.loads(WRITTEN_BY_KUBELET)
    change(document)
    return json.dumps(document)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "exactly the keys Data and Checksum"),
        (_with(lambda d: d.pop("Checksum")), "exactly the keys Data and Checksum"),
        (_with(lambda d: d.update(Checksum=-1)), "is not a uint32"),
        (_with(lambda d: d.update(Checksum=2**32)), "is not a uint32"),
        (_with(lambda d: d.update(Checksum="12")), "is not a uint32"),
        (_with(lambda d: d["Data"].pop("PodDeviceEntries")), "exactly the keys"),
        (_with(lambda d: d["Data"].update(PodDeviceEntries={})), "a list or null"),
        (_with(lambda d: d["Data"].update(RegisteredDevices=[])), "expected an object"),
        (
            _with(lambda d: d["Data"]["RegisteredDevices"].update({"nvidia.com/gpu": "GPU-a"})),
            "'nvidia.com/gpu']: expected a list of device ids",
        ),
        (
            _with(lambda d: d["Data"]["RegisteredDevices"].update({"nvidia.com/gpu": [""]})),
            "expected a list of device ids",
        ),
        (
            _with(lambda d: d["Data"]["RegisteredDevices"].update({"nvidia.com/gpu": ["a", "a"]})),
            "a device id repeats",
        ),
    ],
)
def test_malformed_checkpoint_is_named_not_crashed_on(text, message):
    with pytest.raises(CheckpointError, match=re.escape(message)):
        registered_devices(text)
