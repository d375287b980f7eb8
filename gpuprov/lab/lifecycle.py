"""`up`, `down` and `status` of the lab as a whole.

``up`` is idempotent: with a healthy lab of the same spec it changes nothing, with a different
spec it refuses (the running lab stays as it is), and leftovers of a crashed lab are cleaned
first. ``down`` ends every process by pid, unmounts, deletes namespaces, links and the run
directory, and is safe to run twice.

>>> from gpuprov.lab.spec import default_spec
>>> run = RunDir(Path("/nonexistent/gpuprov-lab"))
>>> status(run)["state"]
'down'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from gpuprov.errors import InputError, Problem
from gpuprov.lab import base, deps, hosts, network, packages, procs, repo, services, ssh
from gpuprov.lab.errors import LabError
from gpuprov.lab.rundir import RunDir, locked
from gpuprov.lab.spec import LabHost


def up(run: RunDir, spec: list[LabHost]) -> dict[str, Any]:
    """Start a lab of ``spec`` (or keep the running one if it has the same spec); its state."""
    require_root("up")
    with locked("up"):
        current = run.read_state()
        wanted = [h.as_dict() for h in spec]
        if current is not None and _healthy(run, current):
            if current["hosts"] == wanted:
                print("a lab with this spec is already up; reusing it", file=sys.stderr)
                return current
            raise InputError(
                [
                    Problem(
                        "gpuprov lab up",
                        (
                            f"a lab is already running with other hosts ({_describe(current['hosts'])}, "
                            f"started {current['started']}); run `gpuprov lab down` first"
                        ),
                    )
                ]
            )
        if current is not None or _leftovers(run):
            print("cleaning up a previous lab that did not shut down", file=sys.stderr)
            _down(run)
        deps.ensure()
        base_dir, built = base.ensure(), repo.ensure()
        try:
            return _start(run, spec, base_dir, built)
        except BaseException:
            _down(run)
            raise


def down(run: RunDir) -> None:
    """Stop the lab and remove everything it made; fine when no lab runs."""
    require_root("down")
    with locked("down"):
        _down(run)


def status(run: RunDir) -> dict[str, Any]:
    """``{"state": "up" | "degraded" | "down", "hosts": [...], ...}`` of the lab in ``run``."""
    current = run.read_state()
    if current is None:
        return {"state": "down", "run_dir": str(run.path), "hosts": []}
    host_rows = []
    for host in current["hosts"]:
        hd = run.host(host["name"])
        host_rows.append(
            {**host, "running": procs.alive(hd.nspawn_pid), "ssh": _port_open(host["ip"], 22)}
        )
    ok = (
        all(h["running"] and h["ssh"] for h in host_rows)
        and procs.alive(run.stuck_pid)
        and procs.alive(run.repo_pid)
    )
    return {
        **current,
        "state": "up" if ok else "degraded",
        "run_dir": str(run.path),
        "hosts": host_rows,
        "stuck_mirror": procs.alive(run.stuck_pid),
        "repo_server": procs.alive(run.repo_pid),
    }


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise InputError(
            [
                Problem(
                    f"gpuprov lab {what}",
                    "needs root (it creates network "
                    "namespaces, overlay mounts and containers); run it with sudo",
                )
            ]
        )


def _start(run: RunDir, spec: list[LabHost], base_dir: Path, built: repo.Repo) -> dict[str, Any]:
    started = time.time()
    (run.path / "hosts").mkdir(parents=True, exist_ok=True)
    ssh.write_config(run, {h.name: h.ip for h in spec})
    shutil.copyfile(built.key, run.repo_key)
    document = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "hosts": [h.as_dict() for h in spec],
        "base": str(base_dir),
        "repo": str(built.path),
        "repositories": {name: services.repo_url(name) for name in packages.repositories()},
        "repo_key": str(run.repo_key),
        "driver_versions": list(packages.DRIVER_VERSIONS),
        "container_toolkit_versions": list(packages.TOOLKIT_VERSIONS),
        "ssh_config": str(run.ssh_config),
        "ssh_key": str(run.key),
    }
    # Written before anything starts, so that a failed `up` can be cleaned by `down`.
    run.write_state(document)
    network.add_bridge()
    services.start_repo_server(run, built.www)
    services.start_stuck_mirror(run)
    hosts.ensure_inotify(len(spec))
    for host in spec:
        hosts.start(run, host, base_dir)
    states = ssh.wait_booted(run, [h.name for h in spec])
    for name, state in states.items():
        if state != "running":
            print(
                f"warning: {name} booted {state}; `ssh -F {run.ssh_config} {name} systemctl "
                "--failed` shows why",
                file=sys.stderr,
            )
    print(f"lab up: {len(spec)} hosts in {time.time() - started:.1f} s", file=sys.stderr)
    return document


def _down(run: RunDir) -> None:
    host_dirs = run.host_dirs()
    # All hosts power off at once: launchers first (or they would boot them again), then
    # SIGTERM to every nspawn, then wait for each.
    for hd in host_dirs:
        procs.stop(hd.launcher_pid, sig=signal.SIGKILL)
    for hd in host_dirs:
        pid = procs.read(hd.nspawn_pid)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    for hd in host_dirs:
        hosts.stop(hd)
    services.stop_all(run)
    network.remove_all()
    left = hosts.mounts_under(run.path)
    if left:
        raise LabError(f"still mounted, not deleting {run.path}: {', '.join(left)}")
    shutil.rmtree(run.path, ignore_errors=True)


def _healthy(run: RunDir, current: dict[str, Any]) -> bool:
    if not (procs.alive(run.stuck_pid) and procs.alive(run.repo_pid)):
        return False
    return all(procs.alive(run.host(h["name"]).nspawn_pid) for h in current["hosts"])


def _leftovers(run: RunDir) -> bool:
    return run.path.exists() or network.bridge_exists() or bool(network.leftover_namespaces())


def _port_open(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=0.5):
            return True
    except OSError:
        return False


def _describe(host_dicts: list[dict[str, Any]]) -> str:
    return ", ".join(f"{h['name']} {h['count']}x{h['model']}" for h in host_dicts)
