"""The simulated driver's C programs, ``nvidia-smi`` and ``gpuprov-sim``, thin over the library.

Command lines of every kind run on one host through the programs (tests/test_sim_smi.py and
tests/test_sim_health.py check their exact output): the exit codes and the state they leave.
Then the C code under AddressSanitizer and LeakSanitizer: no bad access, no leak, on those paths
and the event API's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from gpuprov_lab.sim import state
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import build
from simulated import edit, new_host, programs

HERE = Path(__file__).parent


class Host:
    """A simulated host the C programs drive; ``paths[0]`` is its state file."""

    def __init__(self, tmp_path: Path, model: str, count: int, mig: list[int]):
        self.paths = [new_host(tmp_path, model, count, mig=mig)]

    def edit(self, change) -> None:
        with edit(self.paths[0]) as host:
            change(host)

    def smi(self, *argv: str) -> tuple[int, str]:
        """``nvidia-smi ARGV``: (exit code, output)."""
        return self._run("nvidia-smi", argv, {SIM_ENV: self.paths[0]})[:2]

    def admin(self, *argv: str) -> tuple[int, str]:
        """``gpuprov-sim ARGV``: (exit code, stderr)."""
        code, _, err = self._run("gpuprov-sim", ["--state", self.paths[0], *argv], {})
        return code, err

    def states(self) -> list[str]:
        path = self.paths[0]
        return [Path(path).read_text() if os.path.exists(path) else ""]

    @staticmethod
    def _run(program: str, argv, env: dict[str, str]) -> tuple[int, str, str]:
        result = subprocess.run(
            [str(programs()[program]), *argv],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.returncode, result.stdout, result.stderr


@pytest.fixture
def host(tmp_path):
    """Two A100-80GB, GPU 0 with MIG on."""
    return Host(tmp_path, "A100-80GB", 2, [0])


def test_listing_querying_and_mig_mode_answer(host):
    assert host.smi("-L")[0] == 0
    fields = (
        "index,name,uuid,driver_version,memory.total,mig.mode.current,mig.mode.pending,pci.bus_id"
    )
    for argv in (
        (f"--query-gpu={fields}", "--format=csv"),
        (
            "--query-gpu",
            "memory.total,mig.mode.pending",
            "-i",
            "1",
            "--format=csv,noheader,nounits",
        ),
        ("--query-gpu=name,fan.speed", "--format=csv"),
        ("--query-gpu=name", "--format=json"),
        ("-i", "1", "-mig", "1"),
        ("--query-gpu=mig.mode.current,mig.mode.pending", "-i", "1", "--format=csv,noheader"),
        ("-r", "-i", "1"),
        ("--query-gpu=mig.mode.current", "-i", "1", "--format=csv,noheader"),
        ("-i", "0", "-mig", "0"),
        ("-L", "-i", "7"),
        ("-L", "-i", "x"),
    ):
        host.smi(*argv)


def test_mig_instances_through_nvidia_smi_answer(host):
    out = host.smi("mig", "-cgi", "9:4,14", "-C", "-i", "0")[1]
    assert out.splitlines()[0] == (
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)"
    )
    for argv in (
        ("-L",),
        ("mig", "-lgi"),
        ("mig", "-lci", "-gi", "2"),
        ("mig", "-lgip"),
        ("mig", "-lgipp", "-i", "0"),
        ("mig", "-cgi", "1g.10gb:0,MIG 1g.10gb:3"),
        ("mig", "-cgi", "9:0,5"),
        ("mig", "-cgi", "9:2"),
        ("mig", "-cgi", "4g.20gb"),
        ("mig", "-cgi", "77"),
        ("mig", "-cgi", "19:x"),
        ("mig", "-dgi", "-gi", "2"),
        ("mig", "-cci", "-gi", "7"),
        ("mig", "-cci", "0,0", "-gi", "10"),
        ("mig", "-dci", "-gi", "2", "-ci", "0"),
        ("mig", "-lci"),
        ("mig", "-dci"),
        ("mig", "-dci"),
        ("mig", "-dgi"),
        ("mig", "-dgi"),
        ("mig", "-lgi"),
        ("mig", "-lci", "-gi", "5"),
        ("mig", "-lgi", "-i", "1"),
    ):
        host.smi(*argv)


def test_resets_refused_while_held_answer(host):
    host.smi("-i", "1", "-mig", "1")
    host.edit(lambda host: host["gpus"][1].update(held_by=["nvidia-persistenced.service"]))
    code, out = host.smi("-r", "-i", "1")  # without systemd a listed unit holds the GPU
    assert code == 255 and "  GPU 00000000:17:00.0: In use by another client" in out
    host.edit(lambda host: host["gpus"][0].update(busy=True))
    assert host.smi("-r", "-i", "0,1")[0] == 255
    host.edit(lambda host: host["gpus"][1].update(held_by=[]))
    assert host.smi("-r")[0] == 255  # GPU 0 is still busy
    assert state.load(host.paths[0])["gpus"][1]["mig_current"] is True


def test_no_driver_no_library_and_bad_command_lines_answer(host, tmp_path):
    host.edit(lambda host: host["driver"].update(loaded=False))
    assert host.smi("-L")[0] == 9
    for argv in (["-mig", "2"], ["mig", "-lgi", "-cgi", "9"], [], ["--bogus"], ["-L", "-r"]):
        assert host.smi(*argv)[0] == 2
    host.paths = [str(tmp_path / "absent.json")]
    assert host.smi("-L")[0] == 12


def test_gpuprov_sim_commands_leave_their_state(host):
    for argv in (
        ["driver", "--version", "535.216.01", "--unloaded"],
        ["driver", "--loaded"],
        ["fault", "-i", "1", "--busy", "--held-by", "dcgm", "--held-by", "dcgm"],
        ["fault", "--fail-after", "nvmlDeviceGetName", "3", "--error", "NVML_ERROR_GPU_IS_LOST"],
        ["fault", "--clear-fail-after", "--clear-held-by", "--idle"],
        ["fault", "--fail-after", "nvmlDeviceCreateGpuInstanceWithPlacement", "2"],
        ["set-ecc", "--gpu", "0", "--uncorrected", "3", "--corrected", "9"],
        ["set-ecc", "--gpu", "1", "--corrected-aggregate", "18446744073709551615"],
        ["remap-pending", "--gpu", "1", "--failure"],
        ["retire-page", "--gpu", "0", "--double-bit", "--pending"],
        ["retire-page", "--gpu", "0"],
        ["boot"],
        ["remap-pending", "--gpu", "1", "--clear"],
        ["inject", "xid", "79", "--gpu", "1", "--pid", "7", "--name", "python3"],
    ):
        assert host.admin(*argv)[0] == 0, argv
    kmsg = Path(host.paths[0]).parent.joinpath("kmsg").read_text().split(";", 1)[1]
    assert (
        kmsg == "NVRM: Xid (PCI:0000:17:00): 79, pid=7, name=python3, GPU has fallen off the bus\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["inject", "xid", "79", "--gpu", "5"], "no GPU 5 (the host has 2)"),
        (["set-ecc", "--gpu", "0", "--uncorrected", "-1"], "--uncorrected counts cannot be"),
        (["remap-pending", "--gpu", "-1"], "no GPU -1"),
        (["init", "--model", "A100-80G"], "unknown GPU model 'A100-80G'"),
        (["fault", "-i", "4", "--busy"], "no GPU 4"),
        (["fault", "-i", "1", "--busy", "--fail-after", "nvmlDeviceGetFoo", "1"], "no function"),
        (["fault", "--fail-after", "nvmlDeviceGetName", "x"], "must be a count"),
        (["fault", "--fail-after", "nvmlDeviceGetName", "1", "--error", "OOPS"], "unknown NVML"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_change(host, argv, message):
    before = host.states()
    code, err = host.admin(*argv)
    assert code == 2 and err.startswith("gpuprov-sim: error: ") and message in err
    assert err.count("\n") == 1
    assert host.states() == before


def test_a_driver_version_the_state_could_not_hold_is_refused(host):
    before = host.states()[0]
    code, _, err = host._run(
        "gpuprov-sim", ["--state", host.paths[0], "driver", "--version", "5"], {}
    )
    assert (code, err) == (
        2,
        "gpuprov-sim: error: driver version '5' is not a driver version like 550.127.05\n",
    )
    assert host.states()[0] == before


def test_init_show_and_a_missing_state(tmp_path, capsys):
    path = tmp_path / "lab" / "state.json"
    gpuprov_sim = str(programs()["gpuprov-sim"])
    init = [gpuprov_sim, "--state", str(path), "init", "--model", "H100-80GB", "--count", "3"]
    subprocess.run([*init, "--seed", "gpu-node-1", "--mig", "2"], check=True)
    # The program is a thin layer over the library: what gpuprovSimCreate makes, no more.
    expected = state.load(new_host(tmp_path, "H100-80GB", 3, mig=[2], seed="gpu-node-1"))
    shown = subprocess.run(
        [gpuprov_sim, "--state", str(path), "show"], capture_output=True, text=True, check=True
    )
    assert json.loads(shown.stdout) == expected == state.load(str(path))
    missing = subprocess.run(
        [gpuprov_sim, "--state", str(tmp_path / "none.json"), "boot"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "run `gpuprov-sim init`" in missing.stderr


# -- the C code under the sanitizers -----------------------------------------------------------

SANITIZED = ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
             "-fno-sanitize-recover=all")  # fmt: skip


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory) -> build.Built:
    try:
        return build.build(flags=SANITIZED)
    except build.BuildError as e:
        pytest.skip(f"no sanitizer runtime for this compiler: {e}")


def test_the_programs_and_the_event_api_neither_leak_nor_touch_bad_memory(tmp_path, sanitized):
    env = {
        **os.environ,
        SIM_ENV: str(tmp_path / "gpus.json"),
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=97",
        "UBSAN_OPTIONS": "halt_on_error=1:exitcode=98",
    }

    def run(program: str, *argv: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(sanitized.programs.get(program, program)), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode not in (97, 98), result.stderr[-3000:]
        return result

    for argv in (
        ("init", "--model", "A100-80GB", "--count", "2", "--mig", "0"),
        ("fault", "-i", "1", "--busy", "--held-by", "dcgm"),
        ("fault", "--fail-after", "nvmlDeviceGetName", "1000"),
        ("set-ecc", "--gpu", "0", "--uncorrected", "3"),
        ("remap-pending", "--gpu", "1", "--failure"),
        ("retire-page", "--gpu", "0", "--pending"),
        ("inject", "xid", "79", "--gpu", "1"),
        ("show",),
        ("fault", "-i", "9"),
    ):
        run("gpuprov-sim", *argv)
    for argv in (
        ("-L",),
        ("--query-gpu=index,uuid,memory.total,mig.mode.current,pci.bus_id", "--format=csv"),
        ("mig", "-cgi", "9:4,14"),
        ("mig", "-cci", "0,0,0", "-gi", "2"),
        ("mig", "-cci", "-gi", "4"),
        ("mig", "-cgi", "19", "-C"),
        ("mig", "-lgip"),
        ("mig", "-lgipp"),
        ("mig", "-lgi"),
        ("mig", "-lci"),
        ("-L",),
        ("mig", "-dci"),
        ("mig", "-dgi"),
        ("-i", "1", "-mig", "1"),
        ("-r",),
    ):
        assert run("nvidia-smi", *argv).returncode in (0, 255), argv
    run("gpuprov-sim", "boot")
    check = tmp_path / "events_check"
    compiled = subprocess.run(
        ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *SANITIZED, "-o", str(check),
         str(HERE / "nvml_events_check.c"), f"-I{Path(build.__file__).parent}",
         f"-L{sanitized.library.parent}", f"-l:{build.LIBRARY}",
         f"-Wl,-rpath,{sanitized.library.parent}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    result = run(str(check))
    assert result.returncode == 0, result.stderr
