"""Plan + observed host state -> findings, on hand-built probe documents for every mode."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import admin
from plans import plan_for
from probes import driver_and_mig_files, installed_packages, matching_probe, unit_states
from simulated import programs

from gpuprov.cli.verify import hosts_summary, verify_report
from gpuprov.controller.readback import unreachable
from gpuprov.core.checks.host import compare, wanted_files
from gpuprov.core.findings import Finding
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    APT_PIN_PATH,
    KUBELET_DEVICE_PLUGIN_DIR,
    MIG_LAYOUT_PATH,
    PROBE_SCHEMA,
)
from tests import containerd_states
from tests.probes import kubelet_devices, kubelet_directory

A100 = "NVIDIA A100-SXM4-80GB"
DEVICE_PLUGIN = "/etc/nvidia/device-plugin/config.yaml"
KUBELET = "/var/lib/kubelet/config.yaml"
KUBELET_DIR = "/etc/kubernetes/kubelet.conf.d"
CONTAINERD = "/etc/containerd/config.toml"
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
DOCKER = "/etc/docker/daemon.json"

# mig-parted's all-balanced shape; on an A100-80GB the plan puts 2g@0, 1g@2, 1g@3, 3g@4.
BALANCED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def gi(
    gi_id: int, profile: str, profile_id: int, start: int, size: int, ci_slices: tuple[int, ...]
) -> dict:
    return {
        "id": gi_id,
        "profile_id": profile_id,
        "profile": profile,
        "start": start,
        "size": size,
        "compute_instances": [
            {"id": n, "profile_id": 0, "slice_count": s} for n, s in enumerate(ci_slices)
        ],
    }


def balanced_gis() -> list[dict]:
    return [
        gi(3, "2g.20gb", 14, 0, 2, (2,)),
        gi(5, "1g.10gb", 19, 2, 1, (1,)),
        gi(6, "1g.10gb", 19, 3, 1, (1,)),
        gi(1, "3g.40gb", 9, 4, 4, (3,)),
    ]


def gpu(
    index: int, mig: tuple[bool, bool] | None = (False, False), gis=(), name: str = A100
) -> dict:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": name,
        "memory_total_mib": 81920,
        "pci_bus_id": f"00000000:0{index}:00.0",
        "mig": None if mig is None else {"current": mig[0], "pending": mig[1]},
        "gpu_instances": list(gis),
    }


def probe(gpus: list[dict], files: dict, plan: HostPlan | None = None) -> dict:
    """A probe document; with ``plan``, the kubelet has registered exactly its resources, and
    the driver's and MIG files, the packages and units are as the deploy leaves them."""
    document = {
        "schema": PROBE_SCHEMA,
        "nvml": "ok",
        "error": None,
        "driver_version": "535.261.03",
        "nvml_version": "12.535.261.03",
        "gpus": gpus,
        "files": files,
        "containerd": copy.deepcopy(containerd_states.MATCHING),
    }
    if plan is not None:
        document["kubelet_devices"] = kubelet_devices(plan)
        document["files"] = {**driver_and_mig_files(plan), **files}
        document["packages"] = installed_packages(plan)
        document["units"] = unit_states(plan)
    return document


def yaml_text(text: str) -> str:
    return textwrap.dedent(text).lstrip()


SHARED_PLUGIN = yaml_text("""
    version: v1
    flags:
      migStrategy: none
    sharing:
      timeSlicing:
        renameByDefault: true
        failRequestsGreaterThanOne: true
        resources:
          - name: nvidia.com/gpu
            replicas: 4
""")
MIG_PLUGIN = yaml_text("""
    version: v1
    flags:
      migStrategy: mixed
""")
CONTAINERD_MAIN = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
NVIDIA_DROP_IN = textwrap.dedent("""\
    version = 2
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
          BinaryName = "/usr/bin/nvidia-container-runtime"
""")


def kubelet_conf(max_pods: int) -> str:
    return (
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        f"maxPods: {max_pods}\n"
    )


def host_files(plugin: str | None, max_pods: int) -> dict:
    return {
        DEVICE_PLUGIN: plugin,
        KUBELET: kubelet_conf(110),
        f"{KUBELET_DIR}/50-gpuprov.conf": kubelet_conf(max_pods),
        "/etc/tmpfiles.d/gpuprov-mps.conf": None,
        CONTAINERD: CONTAINERD_MAIN,
        CONTAINERD_DROP_IN: NVIDIA_DROP_IN,
    }


@pytest.fixture
def shared(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    return plan, probe([gpu(0), gpu(1)], host_files(SHARED_PLUGIN, 118), plan)


@pytest.fixture
def mig(tmp_path):
    plan = plan_for(tmp_path, "mig", mig_layout=BALANCED)
    observed = probe(
        [gpu(i, (True, True), balanced_gis()) for i in (0, 1)], host_files(MIG_PLUGIN, 110), plan
    )
    return plan, observed


@pytest.fixture
def whole(tmp_path):
    plan = plan_for(tmp_path, "whole_card")
    return plan, probe([gpu(0), gpu(1)], host_files(None, 110), plan)


@pytest.fixture
def vgpu(tmp_path):
    plan = plan_for(tmp_path, "vgpu", vgpu_flavour="hami")  # 2 GPUs x 10 shares: maxPods 130
    return plan, probe([gpu(0), gpu(1)], host_files(None, 130), plan)


def checks(findings: list[Finding]) -> list[tuple]:
    return [(f.gpu, f.check) for f in findings]


# --- a host that matches its plan has no finding, in every mode


@pytest.mark.parametrize("mode", ["shared", "mig", "whole", "vgpu"])
def test_host_that_matches_its_plan_has_no_finding(mode, request):
    plan, observed = request.getfixturevalue(mode)
    assert compare(plan, observed) == []


def test_instances_are_matched_by_placement_not_by_listing_order(mig):
    plan, observed = mig
    observed["gpus"][0]["gpu_instances"].reverse()
    assert compare(plan, observed) == []


def test_formatting_and_comments_in_config_files_are_not_drift(shared):
    plan, observed = shared
    observed["files"][DEVICE_PLUGIN] = (
        "# written by hand\n{version: v1, flags: {migStrategy: none}, sharing: {timeSlicing: "
        "{failRequestsGreaterThanOne: true, renameByDefault: true, resources: "
        "[{replicas: 4, name: gpu}]}}}\n"
    )
    assert compare(plan, observed) == []


# --- MIG


def test_same_profile_counts_at_other_slots_is_drift_naming_gpu_gi_and_slots(mig):
    plan, observed = mig
    observed["gpus"][1]["gpu_instances"] = [
        gi(5, "1g.10gb", 19, 0, 1, (1,)),
        gi(6, "1g.10gb", 19, 1, 1, (1,)),
        gi(4, "2g.20gb", 14, 2, 2, (2,)),
        gi(2, "3g.40gb", 9, 4, 4, (3,)),
    ]
    findings = compare(plan, observed)
    assert checks(findings) == [(1, "gpu-instances")] * 3
    by_gi = {f.found: f.expected for f in findings}
    assert by_gi == {
        "GI 5: 1g.10gb at slot 0": "1g.10gb at slot 2",
        "GI 6: 1g.10gb at slot 1": "1g.10gb at slot 3",
        "GI 4: 2g.20gb at slots 2-3": "2g.20gb at slots 0-1",
    }
    assert all(f.hint.startswith("run the deploy") for f in findings)


def test_an_extra_and_a_missing_instance_are_named(mig):
    plan, observed = mig
    gis = observed["gpus"][0]["gpu_instances"]
    gis[:] = [g for g in gis if g["profile"] != "3g.40gb"]
    gis.append(gi(8, "1g.10gb", 19, 5, 1, (1,)))
    findings = compare(plan, observed)
    assert {(f.expected, f.found) for f in findings} == {
        ("nothing at slot 5", "GI 8: 1g.10gb at slot 5"),
        ("3g.40gb at slots 4-7", "missing"),
    }


def test_pending_mode_says_reboot_or_reset_that_gpu(mig):
    plan, observed = mig
    observed["gpus"][1].update(mig={"current": False, "pending": True}, gpu_instances=[])
    [finding] = compare(plan, observed)
    assert (finding.gpu, finding.check) == (1, "mig-mode")
    assert finding.found == "MIG disabled (pending enabled)"
    assert finding.hint == "reboot or reset GPU 1 to apply the pending MIG mode"


def test_pending_disable_on_a_mig_gpu_is_drift_before_any_reboot(mig):
    plan, observed = mig
    observed["gpus"][0]["mig"]["pending"] = False
    [finding] = compare(plan, observed)
    assert (finding.gpu, finding.check, finding.found) == (
        0,
        "mig-mode",
        "MIG enabled, pending disabled",
    )


def test_mig_off_where_planned_says_run_the_deploy(mig):
    plan, observed = mig
    observed["gpus"][0].update(mig={"current": False, "pending": False}, gpu_instances=[])
    [finding] = compare(plan, observed)
    assert (finding.gpu, finding.check, finding.hint) == (0, "mig-mode", "run the deploy")


def test_gpu_instance_without_its_compute_instance_is_named(mig):
    plan, observed = mig
    observed["gpus"][0]["gpu_instances"][3]["compute_instances"] = []
    [finding] = compare(plan, observed)
    assert (finding.gpu, finding.check) == (0, "compute-instances")
    assert (finding.expected, finding.found) == (
        "GI 1: 1 CI of 3 slices",
        "GI 1: no compute instance",
    )


def test_a_partial_compute_instance_is_not_the_full_one(mig):
    plan, observed = mig
    observed["gpus"][0]["gpu_instances"][0]["compute_instances"] = [
        {"id": 0, "profile_id": 0, "slice_count": 1},
        {"id": 1, "profile_id": 0, "slice_count": 1},
    ]
    [finding] = compare(plan, observed)
    assert finding.found == "GI 3: 2 CIs of 1+1 slices"


def test_mig_gpu_that_is_not_mig_capable(mig):
    plan, observed = mig
    observed["gpus"][0].update(mig=None, gpu_instances=[])
    assert checks(compare(plan, observed)) == [(0, "mig-mode")]


def test_stale_mig_layout_file_on_a_mig_host_is_drift(mig):
    plan, observed = mig
    layout = {
        "schema": "gpuprov.mig-layout/v1",
        "gpus": [
            {
                "index": i,
                "mig_enabled": True,
                "instances": [
                    {"profile": "3g.40gb", "profile_id": 9, "start": s, "size": 4} for s in (0, 4)
                ],
            }
            for i in (0, 1)
        ],
        "gpu_clients": plan.mig.gpu_clients,
        "allow_reboot": plan.mig.mig_reboot,
    }
    observed["files"][MIG_LAYOUT_PATH] = json.dumps(layout)
    assert checks(compare(plan, observed)) == [(0, "mig-layout"), (1, "mig-layout")]
    for entry in layout["gpus"]:
        entry["instances"] = [g.as_dict() for g in plan.gpus[0].instances]
    observed["files"][MIG_LAYOUT_PATH] = json.dumps(layout)
    assert compare(plan, observed) == []


# --- device plugin config


def test_wrong_replicas_in_the_yaml(shared):
    plan, observed = shared
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN.replace("replicas: 4", "replicas: 2")
    [finding] = compare(plan, observed)
    assert (finding.check, finding.expected, finding.found) == (
        "device-plugin",
        "nvidia.com/gpu replicas: 4",
        "nvidia.com/gpu replicas: 2",
    )


def test_wrong_rename_in_the_yaml(shared):
    plan, observed = shared
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN.replace(
        "renameByDefault: true", "renameByDefault: false"
    )
    [finding] = compare(plan, observed)
    assert finding.expected == "sharing.timeSlicing.renameByDefault: true"
    assert finding.found == "sharing.timeSlicing.renameByDefault: false"


def test_a_quoted_bool_is_not_a_bool(shared):
    plan, observed = shared
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN.replace(
        "failRequestsGreaterThanOne: true", 'failRequestsGreaterThanOne: "true"'
    )
    [finding] = compare(plan, observed)
    assert finding.found == 'sharing.timeSlicing.failRequestsGreaterThanOne: "true"'


def test_mps_section_wins_over_time_slicing(shared):
    plan, observed = shared
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN + (
        "  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n"
    )
    assert [f.found for f in compare(plan, observed)] == [
        "sharing.mps is set (MPS wins over time-slicing)"
    ]


def test_missing_and_unparsable_device_plugin_config(shared):
    plan, observed = shared
    observed["files"][DEVICE_PLUGIN] = None
    assert [(f.check, f.found) for f in compare(plan, observed)] == [("device-plugin", "missing")]
    observed["files"][DEVICE_PLUGIN] = "sharing: [unclosed\n"
    [finding] = compare(plan, observed)
    assert finding.check == "device-plugin" and finding.found.startswith("unparsable YAML")


def test_mig_strategy_in_the_plugin_config(mig):
    plan, observed = mig
    observed["files"][DEVICE_PLUGIN] = MIG_PLUGIN.replace("mixed", "single")
    [finding] = compare(plan, observed)
    assert (finding.expected, finding.found) == (
        'flags.migStrategy: "mixed"',
        'flags.migStrategy: "single"',
    )


# --- kubelet


def test_kubelet_drop_in_after_ours_overrides_max_pods(shared):
    plan, observed = shared
    observed["files"][f"{KUBELET_DIR}/60-site.conf"] = kubelet_conf(250)
    [finding] = compare(plan, observed)
    assert finding.check == "kubelet-max-pods"
    assert finding.found == f"maxPods 250 ({KUBELET_DIR}/60-site.conf)"
    assert "60-site.conf comes after 50-gpuprov.conf" in finding.hint


def test_kubelet_drop_in_before_ours_is_overridden_by_ours(shared):
    plan, observed = shared
    observed["files"][f"{KUBELET_DIR}/40-site.conf"] = kubelet_conf(250)
    assert compare(plan, observed) == []


def test_kubelet_drop_in_overrides_the_main_file(tmp_path):
    plan = plan_for(tmp_path, "whole_card", kubelet_max_pods=200)
    files = host_files(None, 200)
    files[KUBELET] = kubelet_conf(110)
    assert compare(plan, probe([gpu(0), gpu(1)], files, plan)) == []
    files[f"{KUBELET_DIR}/50-gpuprov.conf"] = None
    [finding] = compare(plan, probe([gpu(0), gpu(1)], files, plan))
    assert (finding.expected, finding.found) == ("maxPods 200", f"maxPods 110 ({KUBELET})")


def test_kubelet_without_any_max_pods_runs_with_its_default(tmp_path):
    plan = plan_for(tmp_path, "whole_card", kubelet_config_dir=None, kubelet_max_pods=200)
    files = host_files(None, 200)
    files[KUBELET] = None
    [finding] = compare(plan, probe([gpu(0), gpu(1)], files, plan))
    assert finding.found == "maxPods 110 (kubelet default)"


# --- container runtime


@pytest.fixture
def docker(tmp_path):
    plan = plan_for(tmp_path, "whole_card", container_runtime="docker")
    files = host_files(None, 110)
    del files[CONTAINERD], files[CONTAINERD_DROP_IN]
    files[DOCKER] = json.dumps(
        {
            "log-driver": "journald",
            "default-runtime": "nvidia",
            "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
        }
    )
    return plan, probe([gpu(0), gpu(1)], files, plan)


def test_docker_daemon_json_with_the_nvidia_runtime_matches(docker):
    plan, observed = docker
    assert compare(plan, observed) == []


def test_docker_daemon_json_without_default_runtime(docker):
    plan, observed = docker
    doc = json.loads(observed["files"][DOCKER])
    del doc["default-runtime"]
    observed["files"][DOCKER] = json.dumps(doc)
    [finding] = compare(plan, observed)
    assert (finding.check, finding.expected) == ("container-runtime", 'default-runtime "nvidia"')
    observed["files"][DOCKER] = None
    assert [f.found for f in compare(plan, observed)] == ["missing file"]


# --- leftovers from another mode


def test_time_slicing_config_on_a_mig_host_is_a_leftover(mig):
    plan, observed = mig
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN.replace("none", "mixed")
    assert [(f.check, f.found) for f in compare(plan, observed)] == [
        ("leftover", "sharing: timeSlicing")
    ]


def test_any_device_plugin_config_on_a_whole_card_host_is_a_leftover(whole):
    plan, observed = whole
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN
    assert checks(compare(plan, observed)) == [(None, "leftover")]


def test_time_slicing_config_left_on_a_vgpu_host_is_a_leftover(vgpu):
    plan, observed = vgpu
    observed["files"][DEVICE_PLUGIN] = SHARED_PLUGIN
    [finding] = compare(plan, observed)
    assert (finding.check, finding.expected) == (
        "leftover",
        f"no device plugin config at {DEVICE_PLUGIN}",
    )


def test_mig_left_enabled_on_a_vgpu_host_is_a_leftover(vgpu):
    plan, observed = vgpu
    observed["gpus"][0].update(mig={"current": True, "pending": True})
    assert [(f.gpu, f.check, f.found) for f in compare(plan, observed)] == [
        (0, "leftover", "MIG enabled")
    ]


def test_a_vgpu_host_whose_default_runtime_is_not_nvidia_is_named(vgpu):
    plan, observed = vgpu
    dump = observed["containerd"]["dump"]
    dump["text"] = dump["text"].replace(
        'default_runtime_name = "nvidia"', 'default_runtime_name = "runc"'
    )
    [finding] = compare(plan, observed)
    assert finding.check == "container-runtime"
    assert finding.expected.startswith("default_runtime_name")


def test_a_vgpu_host_without_room_for_its_shares_in_max_pods_is_named(vgpu):
    plan, observed = vgpu
    observed["files"][f"{KUBELET_DIR}/50-gpuprov.conf"] = kubelet_conf(110)
    [finding] = compare(plan, observed)
    assert (finding.check, finding.expected) == ("kubelet-max-pods", "maxPods 130")


def test_mig_enabled_with_instances_on_a_shared_host_is_a_leftover(shared):
    plan, observed = shared
    observed["gpus"][1].update(mig={"current": True, "pending": True}, gpu_instances=balanced_gis())
    findings = compare(plan, observed)
    assert checks(findings) == [(1, "leftover"), (1, "leftover")]
    assert findings[0].found == "MIG enabled"
    assert findings[1].found == "GI 3, 5, 6, 1"


def test_mig_layout_file_and_boot_unit_on_a_whole_card_host_are_leftovers(whole):
    plan, observed = whole
    observed["files"][MIG_LAYOUT_PATH] = "{}"
    observed["files"]["/etc/systemd/system/gpuprov-mig.service"] = "[Unit]\n"
    assert checks(compare(plan, observed)) == [(None, "leftover")] * 2


# --- hardware, driver and the probe itself


def test_hardware_count_and_model_mismatch(whole):
    plan, observed = whole
    observed["gpus"] = [gpu(0, name="NVIDIA H100 80GB HBM3")]
    findings = compare(plan, observed)
    assert [(f.check, f.expected, f.found) for f in findings] == [
        ("hardware", "2 GPUs", "1 GPU"),
        ("hardware", "A100-80GB", "GPU 0: NVIDIA H100 80GB HBM3 (H100-80GB)"),
    ]


def test_unknown_gpu_name_is_named(whole):
    plan, observed = whole
    observed["gpus"][1]["name"] = "NVIDIA Mystery GPU"
    [finding] = compare(plan, observed)
    assert finding.found == "GPU 1: NVIDIA Mystery GPU (not in the catalog)"


def test_driver_version_is_checked_only_when_pinned(tmp_path, whole):
    plan, observed = whole
    observed["driver_version"] = "535.183.01"
    [finding] = compare(plan, observed)
    assert (finding.check, finding.expected, finding.found) == (
        "driver-version",
        "535.261.03",
        "535.183.01",
    )
    unpinned = plan_for(tmp_path, "whole_card", driver_version=None)
    observed["files"][APT_PIN_PATH] = None  # nothing to pin: the deploy removes the file
    assert compare(unpinned, observed) == []


def test_agent_missing_is_one_finding(whole):
    plan, _ = whole
    observed = {
        "schema": PROBE_SCHEMA,
        "nvml": "agent-missing",
        "error": "no agent at /usr/lib/gpuprov/agent.pyz",
        "gpus": [],
    }
    [finding] = compare(plan, observed)
    assert (finding.check, finding.found) == ("agent", "no agent at /usr/lib/gpuprov/agent.pyz")
    assert finding.hint.startswith("run the deploy")


def test_no_probe_document_at_all_is_an_agent_finding(whole):
    plan, _ = whole
    assert checks(compare(plan, {})) == [(None, "agent")]


@pytest.mark.parametrize(
    "state,hint",
    [
        ("library-not-found", "run the deploy (it installs driver 535.261.03)"),
        ("driver-not-loaded", "load the nvidia kernel module"),
    ],
)
def test_nvml_failure_is_a_finding_and_files_are_still_checked(whole, state, hint):
    plan, observed = whole
    observed.update(nvml=state, error="NVML Shared Library Not Found", gpus=[], driver_version=None)
    observed["files"][DEVICE_PLUGIN] = MIG_PLUGIN
    findings = compare(plan, observed)
    assert checks(findings) == [(None, "nvml"), (None, "leftover")]
    assert findings[0].hint.startswith(hint)


# --- what the probe must read, and the report


def test_wanted_files_follow_the_plan_paths(shared, tmp_path):
    plan, observed = shared
    wanted = wanted_files(plan)
    assert set(observed["files"]) - {CONTAINERD_DROP_IN, f"{KUBELET_DIR}/50-gpuprov.conf"} == set(
        wanted.files
    )
    assert wanted.globs == (f"{KUBELET_DIR}/*.conf", "/etc/containerd/conf.d/*.toml")
    docker_plan = plan_for(
        tmp_path,
        "whole_card",
        container_runtime="docker",
        kubelet_config_dir=None,
        containerd_config_path="/x/config.toml",
    )
    wanted = wanted_files(docker_plan)
    assert DOCKER in wanted.files and wanted.globs == ()


def test_report_statuses_and_summary(shared):
    plan, observed = shared
    drifted = copy.deepcopy(observed)
    drifted["files"][DEVICE_PLUGIN] = None
    results = {
        "a": compare(plan, observed),
        "b": compare(plan, drifted),
        "c": [unreachable("c", "connection refused", "check SSH")],
    }
    report = verify_report(results)
    assert [(h["name"], h["status"]) for h in report["hosts"]] == [
        ("a", "ok"),
        ("b", "drift"),
        ("c", "unreachable"),
    ]
    assert report["ok"] is False
    assert report["hosts"][1]["findings"][0]["check"] == "device-plugin"
    assert hosts_summary(results) == "3 hosts: 1 ok, 1 drift (b), 1 unreachable (c)"
    assert verify_report({"a": []})["ok"] is True


# --- round trips through the real probe on simulated GPUs


def smi(state, *args: str) -> None:
    subprocess.run(
        [str(programs()["nvidia-smi"]), *args],
        check=True,
        capture_output=True,
        env={**os.environ, SIM_ENV: str(state)},
    )


def generated(tmp_path, mode: str, **data):
    """A plan whose files live under tmp_path, and the probe document of a simulated host."""
    root = tmp_path / "host"
    (root / "kubelet.conf.d").mkdir(parents=True)
    (root / "containerd" / "conf.d").mkdir(parents=True)
    plan = plan_for(
        tmp_path,
        mode,
        device_plugin_config_path=str(root / "plugin.yaml"),
        kubelet_config_path=str(root / "kubelet.yaml"),
        kubelet_config_dir=str(root / "kubelet.conf.d"),
        containerd_config_path=str(root / "containerd" / "config.toml"),
        **data,
    )
    plugin = {"shared": SHARED_PLUGIN, "mig": MIG_PLUGIN}.get(mode)
    if plugin:
        (root / "plugin.yaml").write_text(plugin)
    (root / "kubelet.conf.d" / "50-gpuprov.conf").write_text(
        kubelet_conf(plan.kubelet.kubelet_max_pods)
    )
    (root / "containerd" / "config.toml").write_text(
        f'version = 2\nimports = ["{root}/containerd/conf.d/*.toml"]\n'
    )
    (root / "containerd" / "conf.d" / "99-nvidia.toml").write_text(NVIDIA_DROP_IN)
    kubelet_directory(root / "device-plugins", plan)
    state = tmp_path / "gpus.json"
    admin.create(str(state), "A100-80GB", 2, seed="compare")
    if mode == "mig":
        smi(state, "-i", "0,1", "-mig", "1")
        smi(state, "-r", "-i", "0,1")
        smi(state, "mig", "-i", "0,1", "-cgi", "14:0,19:2,19:3,9:4", "-C")

    def observe() -> dict:
        wanted = wanted_files(plan)
        argv = [a for path in wanted.files for a in ("--file", path)]
        argv += [a for pattern in wanted.globs for a in ("--glob", pattern)]
        argv += ["--kubelet-devices", str(root / "device-plugins")]
        out = subprocess.run(
            [sys.executable, "-m", "gpuprov.host.agent.probe", *argv],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, SIM_ENV: str(state)},
        ).stdout
        # containerd's own reading of its config is tested with the binaries
        # (tests/test_containerd_check.py); this host's containerd matches its plan.
        document = {**json.loads(out), "containerd": copy.deepcopy(containerd_states.MATCHING)}
        # The files at fixed paths (/etc/apt, /etc/modprobe.d, /etc/gpuprov), the packages and
        # the units the probe would read here are this machine's: as the deploy leaves a host.
        document["files"].update(driver_and_mig_files(plan))
        document["packages"] = installed_packages(plan)
        document["units"] = unit_states(plan)
        # The directory read stands for the kubelet's own, which verify insists on.
        document["kubelet_devices"]["directory"] = KUBELET_DEVICE_PLUGIN_DIR
        return document

    return plan, state, observe


@pytest.mark.parametrize(
    "mode,data",
    [
        ("shared", {"time_slicing_replicas": 4}),
        ("mig", {"mig_layout": BALANCED}),
        ("whole_card", {}),
        ("vgpu", {"vgpu_flavour": "volcano"}),
    ],
)
def test_probe_of_a_simulated_host_that_matches_its_plan(tmp_path, mode, data):
    plan, _, observe = generated(tmp_path, mode, **data)
    observed = observe()
    assert observed["nvml"] == "ok" and len(observed["gpus"]) == 2
    assert compare(plan, observed) == []


def test_probe_of_a_simulated_host_with_mig_left_on_a_shared_host(tmp_path):
    plan, state, observe = generated(tmp_path, "shared", time_slicing_replicas=4)
    smi(state, "-i", "1", "-mig", "1")
    [finding] = compare(plan, observe())
    assert (finding.gpu, finding.check, finding.found) == (
        1,
        "leftover",
        "MIG disabled, pending enabled",
    )


def test_probe_of_a_simulated_host_whose_driver_is_not_loaded(tmp_path):
    plan, state, observe = generated(tmp_path, "whole_card")
    with sim_state.transaction(str(state)) as current:
        current["driver"]["loaded"] = False
    assert checks(compare(plan, observe())) == [(None, "nvml")]


# --- MPS hosts: the config and the host side are both verified


def test_an_mps_host_as_the_deploy_leaves_it_verifies_and_a_time_sliced_one_does_not(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps")
    assert compare(plan, matching_probe(plan)) == []
    still_time_sliced = matching_probe(plan_for(tmp_path, "shared", time_slicing_replicas=4))
    still_time_sliced["files"]["/run/nvidia/mps"] = None
    findings = compare(plan, still_time_sliced)
    assert sorted((f.check, f.found) for f in findings) == [
        ("device-plugin", "sharing: timeSlicing"),
        ("mps", "missing"),
        ("mps", "missing"),
        ("package", "not installed"),
    ]
    assert "nvidia-cuda-mps 535.261.03-*" in [f.expected for f in findings]
