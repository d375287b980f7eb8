"""The lab's queue system as `lab status` and `lab down` see it, from the run directory alone
(no lab needed: a process stands in for the consumer's), and `lab up --queues` refused
without Kubernetes. The lab tests run the real Kueue and Volcano (tests/lab/test_queues_lab.py)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from gpuprov_lab import consumer, procs, queue_system

from gpuprov.cli import main


def test_status_shows_each_process_and_stop_ends_them_and_removes_the_directory(tmp_path: Path):
    directory = queue_system.workdir(tmp_path, "volcano")
    handle = consumer.Consumer("volcano", directory, tmp_path / "none.kubeconfig")
    handle.start_process("vc-scheduler", ["sleep", "60"])
    handle.start_process("vc-controller-manager", ["sleep", "60"])
    recorded = {"system": "volcano", "dir": str(directory), "endpoints": ["10.200.0.1:9443"]}
    pidfiles = [handle.pidfile(n) for n in handle.processes()]

    shown = queue_system.status(tmp_path, recorded)
    assert shown["running"] is True
    assert shown["processes"] == [
        {"name": "vc-controller-manager", "running": True},
        {"name": "vc-scheduler", "running": True},
    ]
    procs.stop(handle.pidfile("vc-scheduler"))
    assert queue_system.status(tmp_path, recorded)["running"] is False

    pids = [procs.read(p) for p in pidfiles]
    queue_system.stop(tmp_path)
    assert not (tmp_path / "queues").exists()
    # Ended: gone, or a zombie until init (not this test) reaps it (seen in a full CI run).
    assert [p for p in pids if p is not None and not procs.wait_gone(p, 0.5)] == []
    queue_system.stop(tmp_path)  # nothing left: fine


def test_status_of_a_lab_without_queues_is_none(tmp_path: Path):
    assert queue_system.status(tmp_path, None) is None


def test_up_with_queues_and_no_kube_is_refused_before_anything_starts():
    result = CliRunner().invoke(main, ["lab", "up", "--no-kube", "--queues", "kueue"])
    assert result.exit_code == 2
    assert "--queues runs against the lab's API server: not with --no-kube" in result.output
