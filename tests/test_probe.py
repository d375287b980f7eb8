"""The probe: the gpuprov.probe/v1 document for MIG and non-MIG hosts, NVML failures, files."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys

import pynvml
import pytest
from click.testing import CliRunner
from gpuprov_lab.sim.contract import SIM_ENV
from simulated import edit, initialized, new_host, traced, use, without_driver

from gpuprov.cli import main as cli
from gpuprov.host.agent import probe

TOP_KEYS = {"schema", "nvml", "error", "driver_version", "nvml_version", "gpus"}
GPU_KEYS = {"index", "uuid", "name", "memory_total_mib", "pci_bus_id", "mig", "gpu_instances"}


def _create(path, index, instances):
    """Lay out GIs (profile id, start, size, with a full CI?) through pynvml, like an applier."""
    use(path)
    with initialized():
        device = pynvml.nvmlDeviceGetHandleByIndex(index)
        for profile_id, start, size, with_ci in instances:
            placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                device, profile_id, ctypes.byref(placement)
            )
            if with_ci:
                slices = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(
                    device, profile_id
                ).sliceCount
                full = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices]
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, full)


def _probe(monkeypatch, path, **kwargs):
    monkeypatch.setenv(SIM_ENV, path)
    return probe.probe(**kwargs)


def test_a100_with_instances_reports_placements_ids_and_compute_instances(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    _create(path, 0, [(9, 4, 4, True), (14, 0, 2, True), (19, 2, 1, False)])
    document = _probe(monkeypatch, path)
    assert set(document) == TOP_KEYS
    assert (document["schema"], document["nvml"], document["error"]) == (
        "gpuprov.probe/v1",
        "ok",
        None,
    )
    assert (document["driver_version"], document["nvml_version"]) == ("535.261.03", "12.535.261.03")
    first, second = document["gpus"]
    assert set(first) == GPU_KEYS
    assert (first["index"], first["name"], first["memory_total_mib"], first["pci_bus_id"]) == (
        0,
        "NVIDIA A100-SXM4-80GB",
        81920,
        "00000000:07:00.0",
    )
    assert first["uuid"].startswith("GPU-")
    assert first["mig"] == {"current": True, "pending": True}
    # Each compute instance is a MIG device with a UUID of its own (the device plugin's id).
    uuids = [ci.pop("uuid") for gi in first["gpu_instances"] for ci in gi["compute_instances"]]
    assert len(set(uuids)) == 2 and all(re.fullmatch(r"MIG-[0-9a-f-]{36}", u) for u in uuids)
    assert first["gpu_instances"] == [
        {
            "id": 3,
            "profile_id": 14,
            "profile": "2g.20gb",
            "start": 0,
            "size": 2,
            "compute_instances": [{"id": 0, "profile_id": 1, "slice_count": 2}],
        },
        {
            "id": 9,
            "profile_id": 19,
            "profile": "1g.10gb",
            "start": 2,
            "size": 1,
            "compute_instances": [],
        },
        {
            "id": 2,
            "profile_id": 9,
            "profile": "3g.40gb",
            "start": 4,
            "size": 4,
            "compute_instances": [{"id": 0, "profile_id": 2, "slice_count": 3}],
        },
    ]
    assert second["mig"] == {"current": False, "pending": False}
    assert second["gpu_instances"] == []


def test_h100_profile_const_and_id_differ_and_the_real_start_shows(tmp_path, monkeypatch):
    # 1g.20gb is NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 (9) but profile id 15; 3g sits at 0 here.
    path = new_host(tmp_path, "H100-80GB", mig=[0])
    _create(path, 0, [(15, 6, 2, True), (9, 0, 4, False)])
    [gpu] = _probe(monkeypatch, path)["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert [
        (gi["profile"], gi["profile_id"], gi["start"], gi["size"]) for gi in gpu["gpu_instances"]
    ] == [("3g.40gb", 9, 0, 4), ("1g.20gb", 15, 6, 2)]
    [ci] = gpu["gpu_instances"][1]["compute_instances"]
    assert ci.pop("uuid").startswith("MIG-")
    assert ci == {"id": 0, "profile_id": 0, "slice_count": 1}


def test_non_mig_gpu_has_null_mig_and_no_instances(tmp_path, monkeypatch):
    [gpu] = _probe(monkeypatch, new_host(tmp_path, "L40S"))["gpus"]
    assert (gpu["name"], gpu["memory_total_mib"], gpu["mig"], gpu["gpu_instances"]) == (
        "NVIDIA L40S",
        46068,
        None,
        [],
    )


def test_pending_mig_mode_shows_and_lists_no_instances(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB")
    with edit(path) as host:
        host["gpus"][0]["mig_pending"] = True
    [gpu] = _probe(monkeypatch, path)["gpus"]
    assert (gpu["mig"], gpu["gpu_instances"]) == ({"current": False, "pending": True}, [])


def test_one_init_and_always_a_shutdown(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0, 1])
    trace = traced(monkeypatch, tmp_path / "trace")
    _probe(monkeypatch, path)
    calls = trace()
    assert (calls["nvmlInitWithFlags"], calls["nvmlShutdown"]) == (1, 1)
    with edit(path) as host:
        host["faults"]["fail_after"] = {
            "function": "nvmlDeviceGetGpuInstances",
            "successes": 3,
            "error": "NVML_ERROR_GPU_IS_LOST",
        }
    document = _probe(monkeypatch, path)
    assert (document["nvml"], document["error"], document["gpus"]) == ("error", "GPU is lost", [])
    assert document["driver_version"] == "535.261.03"
    calls = trace()
    assert (calls["nvmlInitWithFlags"], calls["nvmlShutdown"]) == (1, 1)


@pytest.mark.parametrize(
    "error, nvml",
    [
        ("NVML_ERROR_NO_PERMISSION", "no-permission"),
        ("NVML_ERROR_UNKNOWN", "error"),
    ],
)
def test_init_failures_are_named(tmp_path, monkeypatch, error, nvml):
    path = new_host(tmp_path)
    with edit(path) as host:
        host["faults"]["fail_after"] = {
            "function": "nvmlInitWithFlags",
            "successes": 0,
            "error": error,
        }
    document = _probe(monkeypatch, path)
    assert (document["nvml"], document["gpus"]) == (nvml, [])
    assert document["error"] == str(pynvml.NVMLError(getattr(pynvml, error)))


def test_driver_not_loaded(tmp_path, monkeypatch):
    path = new_host(tmp_path)
    with edit(path) as host:
        host["driver"]["loaded"] = False
    document = _probe(monkeypatch, path)
    assert (document["nvml"], document["error"], document["driver_version"]) == (
        "driver-not-loaded",
        "Driver Not Loaded",
        None,
    )


def test_library_not_found_on_this_machine_without_the_simulation(tmp_path):
    # Without the simulated library on the loader's path this machine has no libnvidia-ml:
    # pynvml's own loader fails, no simulation involved.
    env = without_driver()
    result = subprocess.run(
        [sys.executable, "-m", "gpuprov.host.agent.probe", "--file", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    document = json.loads(result.stdout)
    assert document == {
        "schema": "gpuprov.probe/v1",
        "nvml": "library-not-found",
        "error": "NVML Shared Library Not Found",
        "driver_version": None,
        "nvml_version": None,
        "gpus": [],
        "files": {str(tmp_path / "none"): None},
    }


def test_module_run_uses_the_simulation_named_in_the_environment(tmp_path):
    path = new_host(tmp_path, "T4", 2)
    result = subprocess.run(
        [sys.executable, "-m", "gpuprov.host.agent.probe"],
        capture_output=True,
        text=True,
        env={**os.environ, SIM_ENV: path},
        check=False,
    )
    assert result.returncode == 0
    assert [gpu["name"] for gpu in json.loads(result.stdout)["gpus"]] == ["Tesla T4"] * 2


def test_files_and_globs(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.toml").write_text("a = 1\n")
    (tmp_path / "conf.d" / "b.toml").write_text("b = 2\n")
    (tmp_path / "conf.d" / "skip.txt").write_text("no")
    (tmp_path / "config.yaml").write_text("version: v1\n")
    files = probe.read_files(
        [str(tmp_path / "config.yaml"), str(tmp_path / "missing.yaml")],
        [str(tmp_path / "conf.d" / "*.toml"), str(tmp_path / "none-*")],
    )
    assert files == {
        str(tmp_path / "config.yaml"): "version: v1\n",
        str(tmp_path / "missing.yaml"): None,
        str(tmp_path / "conf.d" / "a.toml"): "a = 1\n",
        str(tmp_path / "conf.d" / "b.toml"): "b = 2\n",
    }


def test_no_files_section_unless_asked(tmp_path, monkeypatch):
    assert "files" not in _probe(monkeypatch, new_host(tmp_path))


def test_cli_probe_prints_the_document(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", mig=[0])
    (tmp_path / "kubelet.yaml").write_text("maxPods: 110\n")
    monkeypatch.setenv(SIM_ENV, path)
    result = CliRunner().invoke(
        cli,
        [
            "probe",
            "--file",
            str(tmp_path / "kubelet.yaml"),
            "--glob",
            str(tmp_path / "*.json"),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["gpus"][0]["mig"] == {"current": True, "pending": True}
    assert document["files"][str(tmp_path / "kubelet.yaml")] == "maxPods: 110\n"
    assert json.loads(document["files"][path])["schema"] == "gpuprov.sim/v1"


def test_bad_command_lines_exit_2():
    assert probe.main(["--format", "yaml"]) == 2
    assert CliRunner().invoke(cli, ["probe", "--format", "yaml"]).exit_code == 2
