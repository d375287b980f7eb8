"""The host-side MIG applier, through nvidia-ml-py's real wrappers against the simulated driver.

Each test gets its own simulated host (a state file in tmp_path). ``nvidia-smi`` on PATH is the
simulated driver's (the C program over the simulated ``libnvidia-ml.so.1``); ``systemctl`` on PATH is a tiny stand-in for systemd whose
units, while active, hold the GPUs named in the state's ``held_by`` (stopping one releases them).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.libnvml import admin
from simulated import Hardware, programs, traced

from gpuprov.core.catalog import find_model
from gpuprov.core.mig.solver import solve
from gpuprov.host import gpu_holders
from gpuprov.host.agent.main import main
from gpuprov.host.mig import apply
from gpuprov.host.mig.layout import load as load_layout

A100 = find_model("A100-80GB")

# A systemd stand-in: units.json maps unit -> {"active": bool, "holds": [GPU index]}; a stop
# takes the unit out of those GPUs' held_by (the client closed the device), a start puts it back.
SYSTEMCTL = """\
import json, os, sys
from gpuprov_lab.sim import state
verb, unit = [a for a in sys.argv[1:] if not a.startswith("-")]
units_path = os.environ["FAKE_SYSTEMD_UNITS"]
with open(units_path + ".log", "a") as log:
    log.write(f"{verb} {unit}\\n")
units = json.load(open(units_path))
known = units.get(unit)
if verb == "is-active":
    sys.exit(0 if known and known["active"] else 3)
if known is None:
    sys.exit(5)
if verb == "stop" and known.get("refuses_stop"):
    sys.exit(1)
known["active"] = verb == "start"
with state.transaction(os.environ["GPUPROV_NVML_SIM"]) as s:
    for index in known["holds"]:
        held = s["gpus"][index]["held_by"]
        if verb == "stop" and unit in held:
            held.remove(unit)
        elif verb == "start" and unit not in held:
            held.append(unit)
json.dump(units, open(units_path, "w"))
"""


@dataclass
class Host:
    """One simulated GPU host and the agent that runs on it."""

    path: Path
    state_path: Path
    capsys: pytest.CaptureFixture
    trace: Callable[[], Counter[str]]
    last: Counter[str] = field(default_factory=Counter)

    def state(self) -> dict:
        return sim_state.load(str(self.state_path))

    def change(self, edit) -> None:
        with sim_state.transaction(str(self.state_path)) as s:
            edit(s)

    def write_layout(
        self, layouts: dict[int, dict[str, int] | None], clients=(), allow_reboot: bool = False
    ) -> None:
        """mig-layout.json as the deploy writes it: GPU index -> layout (None: MIG off)."""
        gpus = []
        for index, layout in layouts.items():
            instances = [i.as_dict() for i in solve(A100, layout).instances] if layout else []
            gpus.append({"index": index, "mig_enabled": layout is not None, "instances": instances})
        (self.path / "mig-layout.json").write_text(
            json.dumps(
                {
                    "schema": "gpuprov.mig-layout/v1",
                    "gpus": gpus,
                    "gpu_clients": list(clients),
                    "allow_reboot": allow_reboot,
                }
            )
        )

    def apply(self, *flags: str) -> tuple[int, dict]:
        """Run ``agent apply`` once; checks that the run initialised NVML exactly once."""
        self.capsys.readouterr()
        self.trace()
        code = main(["apply", "--layout", str(self.path / "mig-layout.json"), *flags])
        out = self.capsys.readouterr().out
        self.last = self.trace()
        assert self.last["nvmlInitWithFlags"] == 1
        return code, json.loads(out)

    def apply_on(self, system: gpu_holders.System) -> tuple[int, dict]:
        """Run the applier with the GPU holders read from ``system``."""
        return apply.run(load_layout(str(self.path / "mig-layout.json")), system=system)

    def calls(self, function: str) -> int:
        """How often the last apply called the NVML C function ``function``."""
        return self.last[function]

    def instances(self, index: int) -> list[tuple[str, int, int, list[int]]]:
        """(profile, start, size, CI slice counts) of each GI on GPU ``index``, by start."""
        out = []
        for gi in self.state()["gpus"][index]["gpu_instances"]:
            name = A100.profile_by_id(gi["profile_id"]).name
            out.append(
                (name, gi["start"], gi["size"], [ci["size"] for ci in gi["compute_instances"]])
            )
        return sorted(out, key=lambda i: i[1])

    def smi_log(self) -> list[str]:
        log = self.path / "nvidia-smi.log"
        return log.read_text().splitlines() if log.exists() else []

    def systemctl_log(self) -> list[str]:
        log = self.path / "units.json.log"
        return log.read_text().splitlines() if log.exists() else []


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def host(tmp_path, monkeypatch, capsys) -> Host:
    state_path = tmp_path / "gpus.json"
    admin.create(str(state_path), "A100-80GB", 2, seed="test-host")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(
        bin_dir / "nvidia-smi",
        f'#!/bin/sh\necho "$*" >> {tmp_path}/nvidia-smi.log\n'
        f'exec {programs()["nvidia-smi"]} "$@"\n',
    )
    _script(bin_dir / "systemctl", f"#!{sys.executable}\n{SYSTEMCTL}")
    (tmp_path / "units.json").write_text("{}")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPUPROV_NVML_SIM", str(state_path))
    monkeypatch.setenv("FAKE_SYSTEMD_UNITS", str(tmp_path / "units.json"))
    # The library logs every C call; a test counts those of one run.
    return Host(tmp_path, state_path, capsys, traced(monkeypatch, tmp_path / "nvml.trace"))


def actions(report: dict, index: int) -> list[str]:
    gpu = next(g for g in report["gpus"] if g["index"] == index)
    return [a["action"] for a in gpu["actions"]]


def test_fresh_gpus_get_mig_mode_reset_and_the_layout_at_exact_placements(host):
    host.write_layout({0: {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}, 1: {"3g.40gb": 2}})

    code, report = host.apply()

    assert code == 0 and report["changed"] and not report["reboot_required"]
    assert report["error"] is None
    assert actions(report, 0) == ["set-mig-mode", "reset", "create", "create", "create"]
    assert host.smi_log() == ["-r -i 0,1"]
    gpus = host.state()["gpus"]
    assert all(g["mig_current"] and g["mig_pending"] for g in gpus)
    assert host.instances(0) == [
        ("4g.40gb", 0, 4, [4]),
        ("2g.20gb", 4, 2, [2]),
        ("1g.10gb", 6, 1, [1]),
    ]
    assert host.instances(1) == [("3g.40gb", 0, 4, [3]), ("3g.40gb", 4, 4, [3])]
    created = next(g for g in report["gpus"] if g["index"] == 0)["actions"][2]
    assert created == {
        "action": "create",
        "gi": created["gi"],
        "ci": 0,
        "profile": "4g.40gb",
        "profile_id": 5,
        "start": 0,
        "size": 4,
    }
    assert created["gi"] in {gi["id"] for gi in gpus[0]["gpu_instances"]}


def test_second_apply_changes_nothing(host):
    host.write_layout({0: {"3g.40gb": 1, "2g.20gb": 2}, 1: {"7g.80gb": 1}})
    assert host.apply()[0] == 0
    before = host.state()

    code, report = host.apply()

    assert code == 0 and not report["changed"]
    assert [g["actions"] for g in report["gpus"]] == [[], []]
    assert [len(g["kept"]) for g in report["gpus"]] == [3, 1]
    assert host.state() == before
    assert host.smi_log() == ["-r -i 0,1"]  # only the first run reset
    for function in (
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
        "nvmlComputeInstanceDestroy",
    ):
        assert host.calls(function) == 0


def test_changing_one_gpus_layout_touches_only_that_gpu_and_keeps_the_matching_instance(host):
    host.write_layout({0: {"4g.40gb": 1, "3g.40gb": 1}, 1: {"4g.40gb": 1, "3g.40gb": 1}})
    host.apply()
    kept_3g = next(gi for gi in host.state()["gpus"][0]["gpu_instances"] if gi["start"] == 4)
    untouched = host.state()["gpus"][1]

    host.write_layout({0: {"3g.40gb": 1, "2g.20gb": 2}, 1: {"4g.40gb": 1, "3g.40gb": 1}})
    code, report = host.apply()

    assert code == 0 and report["changed"]
    gpu0 = report["gpus"][0]
    assert [(k["gi"], k["start"]) for k in gpu0["kept"]] == [(kept_3g["id"], 4)]
    assert [(a["action"], a["profile"], a["start"]) for a in gpu0["actions"]] == [
        ("destroy", "4g.40gb", 0),
        ("create", "2g.20gb", 0),
        ("create", "2g.20gb", 2),
    ]
    assert report["gpus"][1]["actions"] == []
    assert host.state()["gpus"][1] == untouched
    assert kept_3g in host.state()["gpus"][0]["gpu_instances"]  # same id, same CI
    assert host.calls("nvmlGpuInstanceDestroy") == 1
    assert host.calls("nvmlDeviceCreateGpuInstanceWithPlacement") == 2
    assert host.smi_log() == ["-r -i 0,1"]  # no reset for a layout change


def test_same_profile_counts_at_a_wrong_placement_are_fixed(host):
    host.change(lambda s: s["gpus"][0].update(mig_current=True, mig_pending=True))
    # By hand, as `nvidia-smi mig -cgi` lets anyone do: 3g at 0 (as planned) and 1g at 6
    # (planned at 4). A count-only check (mig-parted's assert) would call this applied.
    assert os.system("nvidia-smi mig -i 0 -cgi 9:0,19:6 -C > /dev/null") == 0
    host.write_layout({0: {"3g.40gb": 1, "1g.10gb": 1}})

    code, report = host.apply()

    assert code == 0
    assert [(a["action"], a["start"]) for a in report["gpus"][0]["actions"]] == [
        ("destroy", 6),
        ("create", 4),
    ]
    assert [k["start"] for k in report["gpus"][0]["kept"]] == [0]
    assert host.instances(0) == [("3g.40gb", 0, 4, [3]), ("1g.10gb", 4, 1, [1])]


def test_busy_gpu_without_clients_to_stop_fails_with_a_clear_message(host, capsys):
    host.change(lambda s: s["gpus"][0].update(busy=True))
    host.write_layout({0: {"7g.80gb": 1}})

    code, report = host.apply()

    assert code == 1 and not report["reboot_required"]
    assert "GPU 0: cannot reset to apply the MIG mode" in report["error"]
    assert "In use by another client" in report["error"]
    assert "mig_reboot" in report["error"]
    assert actions(report, 0) == ["set-mig-mode"]
    gpu = host.state()["gpus"][0]
    assert (gpu["mig_current"], gpu["mig_pending"], gpu["gpu_instances"]) == (False, True, [])


def test_refused_reset_with_allow_reboot_asks_for_a_reboot_then_boot_applies(host):
    host.change(lambda s: s["gpus"][0].update(busy=True))
    host.write_layout({0: {"3g.40gb": 2}, 1: {"7g.80gb": 1}}, allow_reboot=True)
    host.change(lambda s: s["gpus"][1].update(mig_current=True, mig_pending=True))

    code, report = host.apply()

    assert code == 3 and report["reboot_required"] and report["error"] is None
    assert "In use by another client" in report["reboot_reason"]
    assert actions(report, 1) == ["create"]  # a GPU that needs no reset is done already
    Hardware(str(host.state_path)).boot()  # what the deploy's reboot does to the GPUs

    code, report = host.apply("--boot")

    assert code == 0 and not report["reboot_required"]
    assert actions(report, 0) == ["create", "create"]
    assert actions(report, 1) == ["create"]  # MIG devices do not survive a reboot
    assert host.instances(0) == [("3g.40gb", 0, 4, [3]), ("3g.40gb", 4, 4, [3])]
    assert host.smi_log() == ["-r -i 0"]  # only GPU 0, and only before the reboot


def test_boot_mode_never_asks_for_a_reboot(host):
    host.change(lambda s: s["gpus"][0].update(busy=True))
    host.write_layout({0: {"7g.80gb": 1}}, allow_reboot=True)

    code, report = host.apply("--boot")

    assert code == 1 and not report["reboot_required"]
    assert "cannot reset" in report["error"]


def test_active_gpu_clients_are_stopped_before_the_mode_change_and_started_again_after(host):
    (host.path / "units.json").write_text(
        json.dumps(
            {
                "nvidia-dcgm": {"active": True, "holds": [0]},
                "nvidia-persistenced": {"active": False, "holds": []},
            }
        )
    )
    host.change(lambda s: s["gpus"][0].update(held_by=["nvidia-dcgm"]))
    host.write_layout({0: {"7g.80gb": 1}}, clients=["nvidia-persistenced", "nvidia-dcgm"])

    code, report = host.apply()

    assert code == 0, report["error"]
    assert report["stopped_units"] == ["nvidia-dcgm"]
    assert host.smi_log() == ["-r -i 0"]  # one reset, dcgm already stopped
    assert host.systemctl_log() == [
        "is-active nvidia-persistenced",
        "is-active nvidia-dcgm",
        "stop nvidia-dcgm",
        "start nvidia-dcgm",
    ]
    assert report["holders"] == []
    assert json.loads((host.path / "units.json").read_text())["nvidia-dcgm"]["active"]
    assert host.instances(0) == [("7g.80gb", 0, 8, [7])]


@pytest.mark.parametrize(
    "function", ["nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance"]
)
def test_nvml_failure_midway_stops_and_a_rerun_converges_without_orphans(host, function):
    host.change(lambda s: s["gpus"][0].update(mig_current=True, mig_pending=True))
    host.change(
        lambda s: s["faults"].update(
            fail_after={"function": function, "successes": 1, "error": "NVML_ERROR_UNKNOWN"}
        )
    )
    host.write_layout({0: {"3g.40gb": 1, "2g.20gb": 2}})

    code, report = host.apply()

    assert code == 1 and report["changed"]
    assert report["error"].startswith("GPU 0: create 2g.20gb at 0:2")
    assert "Unknown Error" in report["error"]
    done = report["gpus"][0]["actions"]
    assert [(a["profile"], a["ci"]) for a in done] == (
        [("3g.40gb", 0)] if function.endswith("Placement") else [("3g.40gb", 0), ("2g.20gb", None)]
    )  # the second GI was left without its CI
    host.change(lambda s: s["faults"].update(fail_after=None))

    code, report = host.apply()

    assert code == 0
    if function.endswith("ComputeInstance"):
        assert ("destroy", 0) in [(a["action"], a["start"]) for a in report["gpus"][0]["actions"]]
    assert host.instances(0) == [
        ("2g.20gb", 0, 2, [2]),
        ("2g.20gb", 2, 2, [2]),
        ("3g.40gb", 4, 4, [3]),
    ]
    assert not host.apply()[1]["changed"]


def test_disabling_mig_destroys_the_instances_then_resets(host):
    host.write_layout({0: {"3g.40gb": 2}, 1: {"7g.80gb": 1}})
    host.apply()
    host.write_layout({0: None, 1: {"7g.80gb": 1}})

    code, report = host.apply()

    assert code == 0
    assert actions(report, 0) == ["destroy", "destroy", "set-mig-mode", "reset"]
    assert report["gpus"][0]["actions"][2] == {"action": "set-mig-mode", "enabled": False}
    assert actions(report, 1) == []
    gpu = host.state()["gpus"][0]
    assert (gpu["mig_current"], gpu["mig_pending"], gpu["gpu_instances"]) == (False, False, [])
    assert host.smi_log()[-1] == "-r -i 0"


def test_boot_after_a_reboot_recreates_the_layout(host):
    host.write_layout({0: {"4g.40gb": 1, "3g.40gb": 1}, 1: {"1g.10gb": 7}})
    host.apply()
    planned = [host.instances(0), host.instances(1)]
    Hardware(str(host.state_path)).boot()
    assert host.instances(0) == []

    code, report = host.apply("--boot")

    assert code == 0 and report["changed"]
    assert "set-mig-mode" not in actions(report, 0) + actions(report, 1)
    assert [host.instances(0), host.instances(1)] == planned
    assert host.smi_log() == ["-r -i 0,1"]  # the boot run needed no reset


def test_check_reports_what_would_change_and_changes_nothing(host):
    host.write_layout({0: {"3g.40gb": 2}})
    before = host.state()

    code, report = host.apply("--check")

    assert code == 0 and report["changed"] and report["check"]
    assert actions(report, 0) == ["set-mig-mode", "reset", "create", "create"]
    assert report["gpus"][0]["actions"][2]["gi"] is None
    assert host.state() == before and host.smi_log() == []


def test_layout_naming_a_gpu_the_host_lacks_is_refused_before_touching_anything(host, capsys):
    host.write_layout({0: {"7g.80gb": 1}, 5: {"7g.80gb": 1}})
    before = host.state()

    code = main(["apply", "--layout", str(host.path / "mig-layout.json")])

    assert code == 2
    assert "GPU 5: the host has 2 GPU(s) (0-1)" in capsys.readouterr().err
    assert host.state() == before


def test_driver_not_loaded_is_a_failure_with_the_nvml_message(host):
    host.change(lambda s: s["driver"].update(loaded=False))
    host.write_layout({0: {"7g.80gb": 1}})

    code, report = host.apply()

    assert code == 1 and report["error"] == "NVML: Driver Not Loaded"


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read the MIG layout"),
        ("{", "not JSON"),
        (
            '{"schema": "gpuprov.mig-layout/v1", "gpus": [], "allow_rebot": true}',
            "unknown key(s) allow_rebot",
        ),
        (
            '{"schema": "gpuprov.mig-layout/v1", "gpus": [{"index": 0, "mig_enabled": false, '
            '"instances": [{"profile": "7g.80gb", "profile_id": 0, "start": 0, "size": 8}]}]}',
            "gpus[0] lists instances but has mig_enabled false",
        ),
        ('{"schema": "gpuprov.mig-layout/v2", "gpus": []}', "expected 'gpuprov.mig-layout/v1'"),
    ],
)
def test_bad_layout_file_is_one_message_and_exit_2(host, capsys, content, message):
    path = host.path / "mig-layout.json"
    if content is not None:
        path.write_text(content)

    code = main(["apply", "--layout", str(path)])

    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: ") and message in err


# --- GPU holders: processes with an NVIDIA device node open (here: files named like them)


@pytest.fixture
def devices(tmp_path):
    """A /dev with nvidia0 and nvidiactl, and the System that reads holders of them."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl"):
        (dev / name).write_text("")
    return dev, gpu_holders.System(devices=str(dev / "nvidia"))


@pytest.fixture
def holder(devices):
    """A real process (`sleep`) holding nvidia0 open, as a CUDA program would."""
    dev, _ = devices
    with open(dev / "nvidia0") as node:
        process = subprocess.Popen(["sleep", "300"], stdin=node)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_process_holding_a_gpu_fails_the_mode_change_by_name_and_nothing_changes(
    host, devices, holder
):
    dev, system = devices
    host.write_layout({0: {"7g.80gb": 1}})
    before = host.state()

    code, report = host.apply_on(system)

    assert code == 1 and not report["changed"]
    assert f"pid {holder.pid} (sleep 300)" in report["error"]
    assert f"holds {dev}/nvidia0" in report["error"]
    assert "gpu_clients" in report["error"] and "nothing was changed" in report["error"]
    assert [h["pid"] for h in report["holders"]] == [holder.pid]
    assert host.state() == before  # MIG mode not even pending
    assert host.smi_log() == []


def test_a_held_gpu_with_reboot_allowed_asks_for_the_reboot_naming_the_holder(
    host, devices, holder
):
    _, system = devices
    host.write_layout({0: {"7g.80gb": 1}}, allow_reboot=True)

    code, report = host.apply_on(system)

    assert code == 3 and report["reboot_required"]
    assert f"pid {holder.pid} (sleep 300)" in report["reboot_reason"]
    assert host.smi_log() == []  # no reset tried: it could not succeed
    gpu = host.state()["gpus"][0]
    assert (gpu["mig_current"], gpu["mig_pending"]) == (False, True)  # the reboot applies it


def test_holders_do_not_matter_to_a_layout_change_without_a_reset(host, devices, holder):
    _, system = devices
    host.change(lambda s: s["gpus"][0].update(mig_current=True, mig_pending=True))
    host.write_layout({0: {"3g.40gb": 2}})

    code, report = host.apply_on(system)

    assert code == 0 and report["changed"] and report["holders"] == []


def test_nvidia_drm_loaded_refuses_the_mode_change_before_anything_changes(host, tmp_path):
    (tmp_path / "sys" / "module" / "nvidia_drm").mkdir(parents=True)
    system = gpu_holders.System(sys=str(tmp_path / "sys"), devices=str(tmp_path / "none"))
    host.write_layout({0: {"7g.80gb": 1}})
    before = host.state()

    code, report = host.apply_on(system)

    assert code == 1
    assert "nvidia_drm kernel module is loaded" in report["error"]
    assert "NVIDIA/mig-parted#181" in report["error"]
    assert host.state() == before and host.smi_log() == []


def test_the_gpu_clients_are_started_again_when_the_change_fails(host):
    (host.path / "units.json").write_text(
        json.dumps({"nvidia-dcgm": {"active": True, "holds": []}})
    )
    host.change(lambda s: s["gpus"][0].update(busy=True))  # a client no unit explains
    host.write_layout({0: {"7g.80gb": 1}}, clients=["nvidia-dcgm"])

    code, report = host.apply()

    assert code == 1 and "In use by another client" in report["error"]
    assert host.systemctl_log() == [
        "is-active nvidia-dcgm",
        "stop nvidia-dcgm",
        "start nvidia-dcgm",
    ]
    assert json.loads((host.path / "units.json").read_text())["nvidia-dcgm"]["active"]


def test_a_client_that_does_not_stop_fails_before_any_change_and_the_others_start_again(host):
    units = {"nvidia-dcgm": {"active": True, "holds": []}, "stuck": {"active": True, "holds": []}}
    units["stuck"]["refuses_stop"] = True
    (host.path / "units.json").write_text(json.dumps(units))
    host.write_layout({0: {"7g.80gb": 1}}, clients=["nvidia-dcgm", "stuck"])
    before = host.state()

    code, report = host.apply()

    assert code == 1
    assert report["error"] == "`systemctl stop stuck` failed; the GPUs were not changed"
    assert host.systemctl_log()[-3:] == ["stop nvidia-dcgm", "stop stuck", "start nvidia-dcgm"]
    assert host.state() == before and host.smi_log() == []
