"""verify on the node: what the kubelet registered from the device plugin against the plan.

Probe documents come from ``tests/probes.py`` (a node serving exactly its plan) and are then
changed the way a node drifts; the checkpoint text the real kubelet wrote is in
``tests/test_kubelet_checkpoint.py``. One test runs the real probe over a directory with real
unix sockets.
"""

from __future__ import annotations

import json
import socket

import pytest
from plans import plan_for

from gpuprov.core.checks.host import compare, probe_command
from gpuprov.host.agent import probe as host_probe
from gpuprov.host.contract import (
    KUBELET_CHECKPOINT_MAX_BYTES,
    KUBELET_DEVICE_PLUGIN_DIR,
    VOLCANO_PLUGIN_SOCKETS,
)
from tests.probes import checkpoint, kubelet_directory, matching_probe, registered
from tests.test_kubelet_checkpoint import WRITTEN_BY_KUBELET

BALANCED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
CHECKPOINT = f"{KUBELET_DEVICE_PLUGIN_DIR}/kubelet_internal_checkpoint"


@pytest.fixture
def shared(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    return plan, matching_probe(plan)


@pytest.fixture
def mig(tmp_path):
    plan = plan_for(tmp_path, "mig", mig_layout=BALANCED)
    return plan, matching_probe(plan)


def found(plan, document) -> list[tuple[str, str, str]]:
    """(check, expected, found) of each finding."""
    return [(f.check, f.expected, f.found) for f in compare(plan, document)]


@pytest.mark.parametrize(
    ("mode", "data"),
    [
        ("shared", {"time_slicing_replicas": 4}),
        ("shared", {"time_slicing_replicas": 3, "time_slicing_rename": False}),
        ("mig", {"mig_layout": BALANCED}),
        ("mig", {"mig_layout": {"3g.40gb": 2}, "mig_strategy": "single"}),
        ("whole_card", {}),
    ],
)
def test_a_node_serving_exactly_its_plan_has_no_finding(tmp_path, mode, data):
    plan = plan_for(tmp_path, mode, **data)
    assert compare(plan, matching_probe(plan)) == []


def test_the_checkpoint_the_real_kubelet_wrote_matches_two_a100s_at_four_replicas(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, gpu_count=2)
    document = matching_probe(plan)
    document["kubelet_devices"]["checkpoint"] = WRITTEN_BY_KUBELET
    assert compare(plan, document) == []


def test_a_stopped_plugin_whose_devices_the_kubelet_still_lists_is_named_with_its_resource(
    shared,
):
    plan, document = shared
    document["kubelet_devices"]["sockets"] = ["kubelet.sock"]
    assert found(plan, document) == [
        (
            "device-plugin-socket",
            "nvidia.com/gpu.shared served by the device plugin "
            f"(nvidia-gpu.shared.sock in {KUBELET_DEVICE_PLUGIN_DIR})",
            "no nvidia-gpu.shared.sock (the kubelet still lists 8 devices)",
        )
    ]


def test_another_replica_count_is_a_finding_naming_the_resource_and_both_counts(shared):
    plan, document = shared
    devices = registered(plan)
    devices["nvidia.com/gpu.shared"] = devices["nvidia.com/gpu.shared"][:6]
    document["kubelet_devices"]["checkpoint"] = checkpoint(devices)
    [finding] = compare(plan, document)
    assert (finding.check, finding.expected, finding.found) == (
        "kubelet-devices",
        "nvidia.com/gpu.shared: 8 devices registered with the kubelet",
        "nvidia.com/gpu.shared: 6",
    )
    assert plan.device_plugin.device_plugin_config_path in finding.hint


def test_a_mig_profile_the_kubelet_lacks_is_named(mig):
    plan, document = mig
    devices = registered(plan)
    del devices["nvidia.com/mig-2g.20gb"]
    document["kubelet_devices"]["checkpoint"] = checkpoint(devices)
    assert found(plan, document) == [
        (
            "kubelet-devices",
            "nvidia.com/mig-2g.20gb: 2 devices registered with the kubelet",
            "no nvidia.com/mig-2g.20gb",
        )
    ]


def test_the_previous_configs_resource_left_in_the_checkpoint_is_not_drift(mig):
    # After a switch from time-slicing to MIG, the kubelet keeps the replaced resource for its
    # 5-minute grace period; no plugin serves it any more.
    plan, document = mig
    devices = {**registered(plan), "nvidia.com/gpu.shared": ["GPU-a::0", "GPU-a::1"]}
    document["kubelet_devices"]["checkpoint"] = checkpoint(devices)
    assert compare(plan, document) == []


def test_an_unplanned_resource_a_live_plugin_socket_serves_is_drift(mig):
    plan, document = mig
    devices = {**registered(plan), "nvidia.com/mig-7g.80gb": ["MIG-x"]}
    document["kubelet_devices"]["checkpoint"] = checkpoint(devices)
    document["kubelet_devices"]["sockets"].append("nvidia-mig-7g.80gb.sock")
    assert found(plan, document) == [
        (
            "device-plugin-socket",
            "no nvidia.com/mig-7g.80gb (not planned)",
            f"nvidia-mig-7g.80gb.sock in {KUBELET_DEVICE_PLUGIN_DIR}: the device plugin "
            "serves nvidia.com/mig-7g.80gb",
        )
    ]


def test_other_vendors_sockets_and_resources_are_not_gpuprovs_business(shared):
    plan, document = shared
    devices = {**registered(plan), "rdma/hca_shared_devices_a": ["r0"]}
    document["kubelet_devices"]["checkpoint"] = checkpoint(devices)
    document["kubelet_devices"]["sockets"].append("rdma-hca.sock")
    assert compare(plan, document) == []


def test_no_checkpoint_is_one_finding_per_planned_resource(mig):
    plan, document = mig
    document["kubelet_devices"]["checkpoint"] = None
    findings = compare(plan, document)
    assert [(f.check, f.expected.split(":")[0]) for f in findings] == [
        ("kubelet-checkpoint", "nvidia.com/mig-1g.10gb"),
        ("kubelet-checkpoint", "nvidia.com/mig-2g.20gb"),
        ("kubelet-checkpoint", "nvidia.com/mig-3g.40gb"),
    ]
    assert all(f.found.startswith(f"{CHECKPOINT}: no such file") for f in findings)
    assert "verify_kubelet_devices" in findings[0].hint


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "malformed: not JSON"),
        ('{"Data": {}, "Checksum": 1}', "malformed: Data: expected exactly the keys"),
        ({"error": "larger than 8388608 bytes"}, "not read: larger than 8388608 bytes"),
    ],
)
def test_an_unreadable_or_malformed_checkpoint_is_named_per_resource(shared, text, why):
    plan, document = shared
    document["kubelet_devices"]["checkpoint"] = text
    [finding] = compare(plan, document)
    assert finding.check == "kubelet-checkpoint"
    assert finding.expected.startswith("nvidia.com/gpu.shared: 8 devices")
    assert finding.found.startswith(f"{CHECKPOINT}: {why}")


@pytest.mark.parametrize(
    ("sockets", "why"),
    [
        (["nvidia-gpu.shared.sock"], f"no kubelet.sock in {KUBELET_DEVICE_PLUGIN_DIR}"),
        (None, f"no directory {KUBELET_DEVICE_PLUGIN_DIR}"),
        ({"error": "unreadable: Permission denied"}, "not listed: unreadable: Permission denied"),
    ],
)
def test_no_kubelet_socket_is_named(shared, sockets, why):
    plan, document = shared
    document["kubelet_devices"]["sockets"] = sockets
    [finding] = compare(plan, document)
    assert finding.check == "kubelet-socket"
    assert why in finding.found


def test_a_probe_without_the_section_names_the_command_that_writes_it(shared):
    # e.g. a snapshot taken before verify read the kubelet's devices
    plan, document = shared
    del document["kubelet_devices"]
    [finding] = compare(plan, document)
    assert finding.check == "kubelet-devices"
    assert f"--kubelet-devices {KUBELET_DEVICE_PLUGIN_DIR}" in finding.hint
    assert finding.hint.endswith(probe_command(plan))


def test_the_switch_off_neither_asks_the_probe_nor_checks(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, verify_kubelet_devices=False)
    document = matching_probe(plan)
    del document["kubelet_devices"]
    assert "--kubelet-devices" not in probe_command(plan)
    assert compare(plan, document) == []


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ([], "kubelet_devices: a list, not a JSON object"),
        ({"directory": "/x", "checkpoint": None}, "kubelet_devices: missing sockets"),
        (
            {"directory": "/x", "checkpoint": 3, "sockets": []},
            "kubelet_devices.checkpoint: an integer, not a file's text, null or an error",
        ),
        (
            {"directory": "/x", "checkpoint": None, "sockets": ["../kubelet.sock"]},
            'kubelet_devices.sockets[0]: "../kubelet.sock" is not a file name',
        ),
        (
            {"directory": "/x", "checkpoint": None, "sockets": "kubelet.sock"},
            "kubelet_devices.sockets: a string, not a list",
        ),
    ],
)
def test_a_malformed_section_is_a_probe_document_finding_not_a_crash(shared, section, problem):
    plan, document = shared
    document["kubelet_devices"] = section
    findings = compare(plan, document)
    assert [(f.check, f.found) for f in findings] == [("probe-document", problem)]


def test_the_probe_lists_only_sockets_and_reads_the_checkpoint(tmp_path, shared):
    plan, _ = shared
    directory = tmp_path / "device-plugins"
    kubelet_directory(directory, plan)
    (directory / "DEPRECATION").write_text("not a socket\n")
    (directory / "old.sock").symlink_to(directory / "kubelet.sock")

    section = host_probe.read_kubelet_devices(str(directory))

    assert section["sockets"] == ["kubelet.sock", "nvidia-gpu.shared.sock"]
    assert json.loads(section["checkpoint"])["Data"]["RegisteredDevices"] == registered(plan)


def test_the_probe_reads_no_more_of_the_checkpoint_than_its_limit(tmp_path):
    directory = tmp_path / "device-plugins"
    directory.mkdir()
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(directory / "kubelet.sock"))
    (directory / "kubelet_internal_checkpoint").write_bytes(
        b" " * (KUBELET_CHECKPOINT_MAX_BYTES + 1)
    )

    section = host_probe.read_kubelet_devices(str(directory))

    assert section["checkpoint"]["error"].startswith(f"larger than {KUBELET_CHECKPOINT_MAX_BYTES}")
    assert section["sockets"] == ["kubelet.sock"]


@pytest.mark.parametrize(("flavour", "left"), [("volcano", 0), ("hami", 3)])
def test_volcanos_own_sockets_are_no_leftover_on_a_volcano_host_only(tmp_path, flavour, left):
    # Volcano's plugin serves on nvidia-vgpu-{number,cores,memory}.sock (measured in the lab).
    factor = {"vgpu_memory_factor": 64} if flavour == "volcano" else {}
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour=flavour, **factor)
    document = matching_probe(plan)
    sockets = document["kubelet_devices"]["sockets"]
    document["kubelet_devices"]["sockets"] = [*sockets, *VOLCANO_PLUGIN_SOCKETS]
    leftovers = [f for f in found(plan, document) if f[0] == "device-plugin-socket"]
    assert len(leftovers) == left, leftovers
