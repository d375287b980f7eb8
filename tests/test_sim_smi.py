"""The simulated ``nvidia-smi`` and ``gpuprov-sim`` (the C programs over the simulated
``libnvidia-ml.so.1``): commands, output shapes, exit codes."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from gpuprov_lab.sim import state
from gpuprov_lab.sim.contract import SIM_ENV
from simulated import edit, new_host, programs, run_program


@pytest.fixture
def host(tmp_path, monkeypatch):
    """Two A100-80GB, GPU 0 with MIG on; ``nvidia-smi`` finds them through the environment."""
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    monkeypatch.setenv(SIM_ENV, path)
    return path


def run(capsys, *argv):
    code = run_program("nvidia-smi", list(argv))
    return code, capsys.readouterr().out


def test_list_gpus_and_their_mig_devices(host, capsys):
    code, out = run(capsys, "-L")
    uuids = [gpu["uuid"] for gpu in state.load(host)["gpus"]]
    assert code == 0
    assert out.splitlines() == [
        f"GPU 0: NVIDIA A100-SXM4-80GB (UUID: {uuids[0]})",
        f"GPU 1: NVIDIA A100-SXM4-80GB (UUID: {uuids[1]})",
    ]
    run(capsys, "mig", "-cgi", "19,19", "-C", "-i", "0")
    lines = run(capsys, "-L")[1].splitlines()
    assert lines[1].startswith("  MIG 1g.10gb     Device  0: (UUID: MIG-")
    assert lines[2].startswith("  MIG 1g.10gb     Device  1: (UUID: MIG-")


def test_query_gpu_csv_with_and_without_header_and_units(host, capsys):
    fields = (
        "index,name,uuid,driver_version,memory.total,mig.mode.current,mig.mode.pending,pci.bus_id"
    )
    code, out = run(capsys, f"--query-gpu={fields}", "--format=csv")
    assert code == 0
    header, first, second = out.splitlines()
    assert header == (
        "index, name, uuid, driver_version, memory.total [MiB], mig.mode.current, "
        "mig.mode.pending, pci.bus_id"
    )
    uuid = state.load(host)["gpus"][0]["uuid"]
    assert first == (
        f"0, NVIDIA A100-SXM4-80GB, {uuid}, 535.261.03, 81920 MiB, Enabled, "
        "Enabled, 00000000:07:00.0"
    )
    assert second.endswith("Disabled, Disabled, 00000000:17:00.0")
    code, out = run(
        capsys,
        "--query-gpu=memory.total,mig.mode.pending",
        "-i",
        "1",
        "--format=csv,noheader,nounits",
    )
    assert (code, out) == (0, "81920, Disabled\n")


def test_query_gpu_rejects_unknown_fields_and_shows_na_without_mig(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(SIM_ENV, new_host(tmp_path, "L40S"))
    assert run(capsys, "--query-gpu=name,mig.mode.current", "--format=csv,noheader") == (
        0,
        "NVIDIA L40S, [N/A]\n",
    )
    code, out = run(capsys, "--query-gpu=name,fan.speed", "--format=csv")
    assert (code, out) == (2, 'Field "fan.speed" is not a valid field to query.\n')


def test_enabling_mig_is_pending_until_reset(host, capsys):
    code, out = run(capsys, "-i", "1", "-mig", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "Enabled MIG Mode for GPU 00000000:17:00.0"
    assert lines[1].startswith(
        "Warning: MIG mode is in pending enable state for GPU 00000000:17:00.0:"
    )
    assert lines[-1] == "All done."
    assert (
        run(
            capsys,
            "--query-gpu=mig.mode.current,mig.mode.pending",
            "-i",
            "1",
            "--format=csv,noheader",
        )[1]
        == "Disabled, Enabled\n"
    )
    assert run(capsys, "-r", "-i", "1") == (0, "GPU 00000000:17:00.0 was successfully reset.\n")
    assert (
        run(capsys, "--query-gpu=mig.mode.current", "-i", "1", "--format=csv,noheader")[1]
        == "Enabled\n"
    )


def test_mig_mode_on_a_gpu_without_mig_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(SIM_ENV, new_host(tmp_path, "T4"))
    code, out = run(capsys, "-mig", "1")
    assert code == 3
    assert (
        out.splitlines()[0] == "Unable to enable MIG Mode for GPU 00000000:07:00.0: Not Supported"
    )


def test_reset_is_refused_while_a_process_or_active_unit_holds_the_gpu(
    host, capsys, monkeypatch, tmp_path
):
    # The unit is active: the simulator asks `systemctl is-active` (without a running systemd,
    # on CI machines and in containers, a listed unit counts as active anyway).
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    run(capsys, "-i", "1", "-mig", "1")
    with edit(host) as current:
        current["gpus"][1]["held_by"] = ["nvidia-persistenced.service"]
    code, out = run(capsys, "-r", "-i", "1")
    assert code == 255
    assert out.splitlines()[:2] == [
        "The following GPUs could not be reset:",
        "  GPU 00000000:17:00.0: In use by another client",
    ]
    assert "1 device is currently being used by one or more other processes" in out
    assert state.load(host)["gpus"][1]["mig_current"] is False
    with edit(host) as current:  # the unit was stopped: it no longer holds the GPU
        current["gpus"][1]["held_by"] = []
    assert run(capsys, "-r", "-i", "1")[0] == 0
    with edit(host) as current:
        current["gpus"][0]["busy"] = True
    assert run(capsys, "-r", "-i", "0,1")[0] == 255


def test_lgip_table_shape_and_free_counts(host, capsys):
    run(capsys, "mig", "-cgi", "9:4")
    code, out = run(capsys, "mig", "-lgip")
    lines = out.splitlines()
    assert code == 0
    assert {len(line) for line in lines} == {79}
    assert lines[1].startswith("| GPU instance profiles:")
    rows = [line for line in lines if line.startswith("|   0  MIG")]
    assert [row.split()[3] for row in rows] == [
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    three_g = next(row for row in rows if "3g.40gb" in row)
    assert three_g.split()[4:7] == ["9", "1/2", "39.25"]


def test_lgipp_lists_the_catalog_placements_like_the_real_tool(host, capsys):
    code, out = run(capsys, "mig", "-lgipp", "-i", "0")
    assert code == 0
    assert out.splitlines() == [
        "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2",
        "GPU  0 Profile ID 14 Placements: {0,2,4}:2",
        "GPU  0 Profile ID  9 Placements: {0,4}:4",
        "GPU  0 Profile ID  5 Placement : {0}:4",
        "GPU  0 Profile ID  0 Placement : {0}:8",
    ]


def test_cgi_with_placements_and_default_compute_instances(host, capsys):
    code, out = run(capsys, "mig", "-cgi", "9:4,14", "-C", "-i", "0")
    assert code == 0
    assert out.splitlines() == [
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using "
        "profile MIG 3g.40gb (ID  2)",
        "Successfully created GPU instance ID  4 on GPU  0 using profile MIG 2g.20gb (ID 14)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  4 using "
        "profile MIG 2g.20gb (ID  1)",
    ]
    code, out = run(capsys, "mig", "-lgi")
    lines = out.splitlines()
    assert {len(line) for line in lines} == {57}
    assert "|   0  MIG 3g.40gb          9        2          4:4     |" in lines
    assert "|   0  MIG 2g.20gb         14        4          2:2     |" in lines
    code, out = run(capsys, "mig", "-lci", "-gi", "2")
    lines = out.splitlines()
    assert {len(line) for line in lines} == {70}
    assert "|   0      2       MIG 3g.40gb          2         0          0:3     |" in lines


def test_cgi_accepts_short_and_full_profile_names(host, capsys):
    code, out = run(capsys, "mig", "-cgi", "1g.10gb:0,MIG 1g.10gb:3")
    assert code == 0
    assert [gi["start"] for gi in state.load(host)["gpus"][0]["gpu_instances"]] == [0, 3]


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["mig", "-cgi", "9:0,5"], 255, "using profile 5: Insufficient Resources"),
        (["mig", "-cgi", "9:2"], 255, "using profile 9:2: Insufficient Resources"),
        (["mig", "-cgi", "4g.20gb"], 3, "using profile 4g.20gb: Not Supported"),
        (["mig", "-cgi", "77"], 3, "using profile 77: Not Supported"),
    ],
)
def test_cgi_failures_exit_non_zero_with_nvml_reason(host, capsys, argv, code, message):
    found, out = run(capsys, *argv)
    assert found == code
    assert message in out
    assert out.splitlines()[-1].startswith("Failed to create GPU instances: ")


def test_cci_dci_dgi_cycle(host, capsys):
    run(capsys, "mig", "-cgi", "9:0,9:4")
    code, out = run(capsys, "mig", "-cci", "-gi", "1")
    assert (code, out) == (
        0,
        "Successfully created compute instance ID  0 on GPU  0 GPU "
        "instance ID  1 using profile MIG 3g.40gb (ID  2)\n",
    )
    assert run(capsys, "mig", "-cci", "0,0", "-gi", "2")[0] == 0
    code, out = run(capsys, "mig", "-dgi", "-gi", "1")
    assert code == 255
    assert out.splitlines() == [
        "Unable to destroy GPU instance ID  1 from GPU  0: In use by another client",
        "Failed to destroy GPU instances: In use by another client",
    ]
    code, out = run(capsys, "mig", "-dci", "-gi", "2", "-ci", "1")
    assert (code, out) == (
        0,
        "Successfully destroyed compute instance ID  1 from GPU  0 GPU instance ID  2\n",
    )
    assert run(capsys, "mig", "-dci")[0] == 0
    assert run(capsys, "mig", "-dci") == (6, "No compute instances found: Not Found\n")
    code, out = run(capsys, "mig", "-dgi")
    assert code == 0
    assert out.splitlines() == [
        "Successfully destroyed GPU instance ID  1 from GPU  0",
        "Successfully destroyed GPU instance ID  2 from GPU  0",
    ]
    assert run(capsys, "mig", "-dgi") == (6, "No GPU instances found: Not Found\n")
    assert run(capsys, "mig", "-lgi") == (6, "No GPU instances found: Not Found\n")


def test_unknown_gpu_instance_id_and_gpu_index(host, capsys):
    code, out = run(capsys, "mig", "-lci", "-gi", "5")
    assert (code, out) == (6, "Unable to find GPU instance ID  5 on GPU  0: Not Found\n")
    assert run(capsys, "-L", "-i", "7") == (6, "No devices were found\n")


def test_mig_commands_need_a_mig_enabled_gpu(host, capsys):
    assert run(capsys, "mig", "-lgi", "-i", "1") == (6, "No MIG-enabled devices found.\n")


def test_no_driver_and_no_library(host, tmp_path, monkeypatch, capsys):
    with edit(host) as current:
        current["driver"]["loaded"] = False
    code, out = run(capsys, "-L")
    assert code == 9
    assert out.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    monkeypatch.setenv(SIM_ENV, str(tmp_path / "absent.json"))
    code, out = run(capsys, "-L")
    assert code == 12
    assert out.startswith("NVIDIA-SMI couldn't find libnvidia-ml.so library")


def test_bad_command_lines_exit_2(host, capsys):
    assert run_program("nvidia-smi", ["-mig", "2"]) == 2
    assert run_program("nvidia-smi", ["mig", "-lgi", "-cgi", "9"]) == 2
    assert run_program("nvidia-smi", []) == 2


def test_runs_standalone_finding_the_library_beside_it(host):
    result = subprocess.run(
        [str(programs()["nvidia-smi"]), "-L"],
        capture_output=True,
        text=True,
        env={**os.environ, SIM_ENV: host},
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-")


# -- gpuprov-sim ---------------------------------------------------------------------------


def test_admin_init_driver_boot_fault_show(tmp_path, capsys):
    path = str(tmp_path / "lab" / "state.json")
    assert (
        run_program(
            "gpuprov-sim",
            [
                "--state",
                path,
                "init",
                "--model",
                "H100-80GB",
                "--count",
                "3",
                "--seed",
                "gpu-node-1",
            ],
        )
        == 0
    )
    host = state.load(path)
    assert [gpu["model"] for gpu in host["gpus"]] == ["H100-80GB"] * 3
    assert host == state.load(new_host(tmp_path / "library", "H100-80GB", 3, seed="gpu-node-1"))
    assert (
        run_program(
            "gpuprov-sim", ["--state", path, "driver", "--version", "535.216.01", "--unloaded"]
        )
        == 0
    )
    assert state.load(path)["driver"] == {"loaded": False, "version": "535.216.01"}
    assert (
        run_program(
            "gpuprov-sim", ["--state", path, "fault", "-i", "1", "--busy", "--held-by", "dcgm"]
        )
        == 0
    )
    assert (
        run_program(
            "gpuprov-sim",
            [
                "--state",
                path,
                "fault",
                "--fail-after",
                "nvmlDeviceGetName",
                "3",
                "--error",
                "NVML_ERROR_GPU_IS_LOST",
            ],
        )
        == 0
    )
    host = state.load(path)
    assert (host["gpus"][1]["busy"], host["gpus"][1]["held_by"]) == (True, ["dcgm"])
    assert host["gpus"][0]["busy"] is False
    assert host["faults"]["fail_after"] == {
        "function": "nvmlDeviceGetName",
        "successes": 3,
        "error": "NVML_ERROR_GPU_IS_LOST",
        "succeeded": 0,
    }
    with edit(path) as current:
        current["gpus"][2]["mig_pending"] = True
    assert run_program("gpuprov-sim", ["--state", path, "boot"]) == 0
    host = state.load(path)
    assert host["gpus"][2]["mig_current"] is True
    assert (host["gpus"][1]["busy"], host["gpus"][1]["held_by"]) == (False, ["dcgm"])
    capsys.readouterr()
    assert run_program("gpuprov-sim", ["--state", path, "show"]) == 0
    assert json.loads(capsys.readouterr().out) == host


@pytest.mark.parametrize(
    "argv, message",
    [
        (["init", "--model", "A100-80G"], "unknown GPU model 'A100-80G'"),
        (["fault", "-i", "4", "--busy"], "no GPU 4"),
        (["fault", "--fail-after", "nvmlDeviceGetFoo", "1"], "no function 'nvmlDeviceGetFoo'"),
        (["fault", "--fail-after", "nvmlDeviceGetName", "x"], "must be a count"),
        (["fault", "--fail-after", "nvmlDeviceGetName", "1", "--error", "OOPS"], "unknown NVML"),
    ],
)
def test_admin_bad_input_is_one_message_and_exit_2(tmp_path, capsys, argv, message):
    path = new_host(tmp_path)
    assert run_program("gpuprov-sim", ["--state", path, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_admin_without_state_file(tmp_path, capsys):
    assert run_program("gpuprov-sim", ["--state", str(tmp_path / "none.json"), "boot"]) == 2
    assert "run `gpuprov-sim init`" in capsys.readouterr().err
