"""``agent.pyz settle``: the deploy's wait until the kubelet has registered the planned devices,
run against kubelet directories as a node has them (the checkpoint a real kubelet writes, real
unix sockets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuprov.host.agent.main import main as agent_main
from gpuprov.host.kubelet import settle
from tests.plans import plan_for
from tests.probes import kubelet_directory


@pytest.fixture
def plugin_process():
    """A process that the host shows as NVIDIA's device plugin (its first argument's file
    name), as a DaemonSet's or systemd's plugin shows."""
    process = subprocess.Popen(["/usr/bin/nvidia-device-plugin", "60"], executable="sleep")
    # Popen returns once the child is forked, maybe before its exec: until then /proc shows the
    # parent's command line.
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().startswith(b"/usr/bin/nvidia-device-plugin\0"):
        assert time.monotonic() < deadline, cmdline.read_bytes()
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def registered_node(directory: Path, plan) -> None:
    """A kubelet directory whose checkpoint was written after every socket appeared: the
    kubelet has recorded the plugin's registration."""
    kubelet_directory(directory, plan)
    later = time.time_ns() + 1_000_000_000
    os.utime(directory / "kubelet_internal_checkpoint", ns=(later, later))


def test_a_node_serving_the_plan_is_settled_at_once(tmp_path, plugin_process):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    registered_node(tmp_path / "dp", plan)
    assert settle.missing(str(tmp_path / "dp"), plan.resources) == []
    want = [f"--want={r}={n}" for r, n in plan.resources.items()]
    assert agent_main(["settle", f"--dir={tmp_path / 'dp'}", *want, "--timeout=0"]) == 0


def test_the_old_replica_count_is_named_and_fails_after_the_timeout(
    tmp_path, capsys, plugin_process
):
    (tmp_path / "old").mkdir(), (tmp_path / "new").mkdir()
    old = plan_for(tmp_path / "old", "shared", time_slicing_replicas=4)
    new = plan_for(tmp_path / "new", "shared", time_slicing_replicas=2)
    registered_node(tmp_path / "dp", old)
    [(resource, count)] = new.resources.items()

    code = settle.main([f"--dir={tmp_path / 'dp'}", f"--want={resource}={count}", "--timeout=0.2"])

    assert code == 1
    err = capsys.readouterr().err
    assert f"{resource}: {2 * count} of {count} devices registered" in err


def test_a_missing_plugin_socket_is_named(tmp_path):
    plan = plan_for(tmp_path, "whole_card")
    registered_node(tmp_path / "dp", plan)
    (tmp_path / "dp" / "nvidia-gpu.sock").unlink()
    assert settle.missing(str(tmp_path / "dp"), plan.resources) == [
        "no nvidia-gpu.sock (the plugin does not serve nvidia.com/gpu)"
    ]


def test_no_kubelet_directory_is_named(tmp_path):
    assert settle.missing(str(tmp_path / "none"), {"nvidia.com/gpu": 2}) == [
        f"no checkpoint in {tmp_path / 'none'}"
    ]


def test_it_returns_once_the_kubelet_rewrites_its_checkpoint(tmp_path):
    (tmp_path / "old").mkdir(), (tmp_path / "new").mkdir()
    old = plan_for(tmp_path / "old", "shared", time_slicing_replicas=4)
    new = plan_for(tmp_path / "new", "shared", time_slicing_replicas=2)
    registered_node(tmp_path / "dp", old)
    checkpoint = tmp_path / "dp" / "kubelet_internal_checkpoint"
    text = json.loads(checkpoint.read_text())
    [(resource, ids)] = text["Data"]["RegisteredDevices"].items()

    def kubelet_rewrites() -> None:
        time.sleep(0.5)
        text["Data"]["RegisteredDevices"][resource] = ids[: len(ids) // 2]
        checkpoint.write_text(json.dumps(text))
        later = time.time_ns() + 2_000_000_000
        os.utime(checkpoint, ns=(later, later))

    writer = threading.Thread(target=kubelet_rewrites)
    writer.start()
    started = time.monotonic()
    left = settle.wait(str(tmp_path / "dp"), new.resources, timeout=30)
    writer.join()
    assert left == []
    assert time.monotonic() - started < 30


def test_a_bad_command_line_is_exit_2(capsys):
    assert settle.main(["--dir=/x", "--want=nvidia.com/gpu"]) == 2
    assert "RESOURCE=COUNT" in capsys.readouterr().err


def test_a_socket_newer_than_the_checkpoint_is_not_registered_yet(tmp_path):
    """A plugin (or kubelet) that has started again since the kubelet last wrote its
    checkpoint: the socket is there, the registration is not (yet)."""
    plan = plan_for(tmp_path, "whole_card")
    registered_node(tmp_path / "dp", plan)
    checkpoint = tmp_path / "dp" / "kubelet_internal_checkpoint"
    earlier = checkpoint.stat().st_mtime_ns - 5_000_000_000
    os.utime(checkpoint, ns=(earlier, earlier))
    assert settle.missing(str(tmp_path / "dp"), plan.resources) == [
        "kubelet.sock is newer than the checkpoint (not registered yet)",
        "nvidia-gpu.sock is newer than the checkpoint (not registered yet)",
    ]


def test_the_plugin_process_is_found_by_its_program_name(plugin_process):
    assert settle.plugin_runs()


def host_processes(root: Path, *argvs: list[str]) -> Path:
    """A host's process list as ``/proc`` shows it: one ``PID/cmdline`` per process."""
    for pid, argv in enumerate(argvs, start=1):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / "self").mkdir()
    return root


def test_a_host_without_the_plugin_process_has_none(tmp_path):
    proc = host_processes(tmp_path / "proc", ["/sbin/init"], ["/usr/bin/kubelet", "--v=2"])
    assert not settle.plugin_runs(str(proc))
    (proc / "3").mkdir()
    (proc / "3" / "cmdline").write_bytes(b"/usr/bin/nvidia-device-plugin\0--config-file=x\0")
    assert settle.plugin_runs(str(proc))


def test_no_plugin_running_means_nothing_to_wait_for(tmp_path, capsys):
    """A node deployed before the device plugin chart is installed: a kubelet, no plugin."""
    plan = plan_for(tmp_path, "whole_card")
    want = [f"--want={r}={n}" for r, n in plan.resources.items()]
    proc = host_processes(tmp_path / "proc", ["/usr/bin/kubelet"])
    args = [f"--dir={tmp_path / 'none'}", *want, "--timeout=0.5", f"--proc={proc}"]
    assert settle.main(args) == 0
    assert "no nvidia-device-plugin runs on this host" in capsys.readouterr().out


def settle_process(*args: str) -> subprocess.CompletedProcess:
    """``agent.pyz settle`` as the deploy runs it: a process of its own, here under a limit."""
    return subprocess.run(
        [sys.executable, "-m", "gpuprov.host.agent", "settle", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "-1", "1e9", "soon"])
def test_a_timeout_that_never_ends_or_is_no_number_is_exit_2(tmp_path, timeout):
    # Before: --timeout nan made the deadline never arrive (time >= nan is false): a hang.
    proc = host_processes(tmp_path / "proc", ["/usr/bin/nvidia-device-plugin"])
    result = settle_process(
        f"--dir={tmp_path}", "--want=nvidia.com/gpu=1", f"--timeout={timeout}", f"--proc={proc}"
    )
    assert result.returncode == 2, result.stderr
    assert "--timeout: must be a number of seconds from 0 to 86400" in result.stderr or (
        "is not a number of seconds" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_a_fifo_as_the_checkpoint_is_named_and_never_waited_on(tmp_path):
    # Before: opening the FIFO waited for a writer, whatever --timeout said.
    (tmp_path / "dp").mkdir()
    os.mkfifo(tmp_path / "dp" / "kubelet_internal_checkpoint")
    assert settle.missing(str(tmp_path / "dp"), {"nvidia.com/gpu": 1}) == [
        f"{tmp_path / 'dp' / 'kubelet_internal_checkpoint'} unreadable: not a regular file"
    ]
    proc = host_processes(tmp_path / "proc", ["/usr/bin/nvidia-device-plugin"])
    started = time.monotonic()
    result = settle_process(
        f"--dir={tmp_path / 'dp'}", "--want=nvidia.com/gpu=1", "--timeout=1", f"--proc={proc}"
    )
    assert result.returncode == 1 and time.monotonic() - started < 30
    assert "unreadable: not a regular file" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "text, said",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        (
            '{"Data": {"PodDeviceEntries": null, "RegisteredDevices": {}}, "Checksum": '
            + "9" * 5000
            + "}",
            "not the kubelet's checkpoint: Exceeds the limit",
        ),
        (
            '{"Data": {"PodDeviceEntries": null, "RegisteredDevices": {}}, "Checksum": 1'
            + "0" * 100
            + "}",
            "Checksum an integer of 333 bits is not a uint32",
        ),
    ],
)
def test_a_deep_or_5000_digit_checkpoint_is_named_not_a_traceback(tmp_path, text, said):
    (tmp_path / "dp").mkdir()
    (tmp_path / "dp" / "kubelet_internal_checkpoint").write_text(text)
    [problem] = settle.missing(str(tmp_path / "dp"), {"nvidia.com/gpu": 1})
    assert said in problem and len(problem) < 400
    proc = host_processes(tmp_path / "proc", ["/usr/bin/nvidia-device-plugin"])
    result = settle_process(
        f"--dir={tmp_path / 'dp'}", "--want=nvidia.com/gpu=1", "--timeout=0", f"--proc={proc}"
    )
    assert result.returncode == 1 and said in result.stderr and "Traceback" not in result.stderr
