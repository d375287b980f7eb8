"""`up`, `down` and `status` of the lab as a whole.

``up`` is idempotent: with a healthy lab of the same spec it changes nothing, with a different
spec it refuses (the running lab stays as it is), and leftovers of a crashed lab are cleaned
first. With Kubernetes (the default) it starts etcd and kube-apiserver on the bridge address
(``controlplane.py``) before the hosts, and each host boots the real kubelet, registered as a
Node, and NVIDIA's real device plugin; ``up`` returns once every Node is Ready. With ``queues``
(``kueue`` or ``volcano``) it also starts that queue system against the lab's API server
(``queue_system.py``); on a running lab of the same hosts it starts, replaces or stops only
the queue system, the hosts untouched. ``down`` powers
the hosts off (their kubelets and plugins with them), stops the control plane, ends every
process by pid, unmounts, deletes namespaces, links and the run directory (etcd's data
included), and is safe to run twice.

>>> from gpuprov_lab.spec import default_spec
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

from gpuprov.core.cluster import manifests
from gpuprov.core.errors import InputError, Problem
from gpuprov_lab import (
    base,
    controlplane,
    deps,
    hosts,
    images,
    kubebuild,
    network,
    packages,
    plugin_service,
    procs,
    queue_system,
    repo,
    services,
    ssh,
    vgpu_plugin_service,
)
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import RunDir, locked
from gpuprov_lab.spec import GATEWAY, LabHost

NODES_READY_TIMEOUT = 90.0  # boot to Ready measured 1-3 s per host; 16 hosts share 2 cores


def up(
    run: RunDir,
    spec: list[LabHost],
    kube: bool = True,
    plugin: Path | None = None,
    queues: str | None = None,
) -> dict[str, Any]:
    """Start a lab of ``spec`` (or keep the running one if it has the same spec); its state.

    ``kube``: run the control plane, and the kubelet and device plugin on every host;
    ``plugin``: the device plugin binary (default: shared/bin's, ``plugin_service.default_binary``);
    ``queues``: the queue system to run (one of ``queue_system.SYSTEMS``; needs ``kube``).
    """
    require_root("up")
    if queues is not None and (queues not in queue_system.SYSTEMS or not kube):
        raise InputError(
            [
                Problem(
                    "gpuprov lab up",
                    f"--queues {queues}: one of {', '.join(queue_system.SYSTEMS)}, "
                    "with Kubernetes (not --no-kube)",
                )
            ]
        )
    with locked("up"):
        current = run.read_state()
        wanted = [h.as_dict() for h in spec]
        if current is not None and _healthy(run, current):
            if current["hosts"] == wanted and bool(current.get("kube")) == kube:
                if _queues_as_asked(run, current, queues):
                    print("a lab with this spec is already up; reusing it", file=sys.stderr)
                    return current
                return _restart_queues(run, current, queues)
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
        binaries = _kube_binaries(plugin) if kube else None
        try:
            return _start(run, spec, base_dir, built, binaries, queues)
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
    kube = current.get("kube")
    if kube:
        kube = {**kube, **_cluster(run, kube, [h["name"] for h in current["hosts"]])}
        if kube["api"] is not None:
            ok = ok and kube["api"] and all(n["ready"] for n in kube["nodes"])
            ok = ok and all(c["running"] and c["healthy"] is not False for c in kube["components"])
    queues = queue_system.status(run.path, current.get("queues"))
    ok = ok and (queues is None or queues["running"])
    return {
        **current,
        "state": "up" if ok else "degraded",
        "run_dir": str(run.path),
        "hosts": host_rows,
        "stuck_mirror": procs.alive(run.stuck_pid),
        "repo_server": procs.alive(run.repo_pid),
        "kube": kube,
        "queues": queues,
    }


def _cluster(run: RunDir, kube: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The API server's view: ``api`` (it answered; None: not asked, the kubeconfig is not
    readable here), ``nodes`` (one row per lab host, a host with no Node shown as not ready),
    ``components`` (``_components``), ``error`` (why it did not answer)."""
    if not os.access(run.admin_kubeconfig, os.R_OK):
        # The kubeconfig is root's (mode 0600): say so, and judge the lab without it.
        reason = f"cannot read {run.admin_kubeconfig} (root's): run `sudo gpuprov lab status`"
        return {"api": None, "error": reason, "nodes": [], "components": []}
    try:
        listed = {n["name"]: n for n in controlplane.nodes(kube["kubectl"], run.admin_kubeconfig)}
    except LabError as e:
        return {"api": False, "error": str(e), "nodes": [], "components": _components(run, kube)}
    components = _components(run, kube)
    missing = {"ready": False, "allocatable": {}, "registered": False}
    rows = [
        {"registered": True, **listed[n]} if n in listed else {"name": n, **missing} for n in names
    ]
    return {"api": True, "nodes": rows, "components": components}


def _components(run: RunDir, kube: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per control-plane process: ``name``, ``running`` (its pid), ``port`` and
    ``healthy`` (the scheduler's and controller manager's ``/healthz``; None where not asked)."""
    ports = kube.get("ports") or {}
    rows = []
    for name in reversed(controlplane.COMPONENTS):  # etcd first, as they start
        running = controlplane.alive(run.kube, name)
        healthy = None
        if name in ("kube-scheduler", "kube-controller-manager") and name in ports:
            healthy = running and controlplane.healthz(ports[name])
        rows.append({"name": name, "running": running, "port": ports.get(name), "healthy": healthy})
    return rows


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


def _kube_binaries(plugin: Path | None) -> dict[str, Path]:
    """kube-apiserver, etcd, kubectl and kubelet (built once per version, ``kubebuild``) and
    the device plugin."""
    binaries = kubebuild.ensure()
    return {**binaries, plugin_service.BUILD: plugin or plugin_service.default_binary()}


def _start(
    run: RunDir,
    spec: list[LabHost],
    base_dir: Path,
    built: repo.Repo,
    binaries: dict[str, Path] | None,
    queues: str | None = None,
) -> dict[str, Any]:
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
        "kube": None,
        "queues": None,
    }
    if binaries is not None:
        document["kube"] = {
            "server": f"https://{GATEWAY}:{controlplane.API_PORT}",
            "kubeconfig": str(run.admin_kubeconfig),
            "kubectl": str(binaries["kubectl"]),
            "kubernetes_version": kubebuild.KUBERNETES_VERSION,
            "device_plugin": str(binaries[plugin_service.BUILD]),
        }
    # Written before anything starts, so that a failed `up` can be cleaned by `down`.
    run.write_state(document)
    network.add_bridge()
    services.start_repo_server(run, built.www)
    services.start_stuck_mirror(run)
    parts = plane = None
    if binaries is not None:
        parts, plane = _start_cluster(run, spec, binaries, images.ensure(base_dir))
        document["kube"]["ports"] = plane.ports()
        run.write_state(document)
    hosts.ensure_inotify(len(spec))
    for host in spec:
        hosts.start(run, host, base_dir, parts)
    states = ssh.wait_booted(run, [h.name for h in spec])
    for name, state in states.items():
        if state != "running":
            print(
                f"warning: {name} booted {state}; `ssh -F {run.ssh_config} {name} systemctl "
                "--failed` shows why",
                file=sys.stderr,
            )
    if plane is not None:
        waited = time.time()
        plane.wait_controllers()
        print(f"controllers ready {time.time() - waited:.1f} s after the hosts", file=sys.stderr)
        _wait_nodes_ready(run, document["kube"], [h.name for h in spec])
        if queues is not None:
            document["queues"] = _start_queues(run, queues)
            run.write_state(document)
    print(f"lab up: {len(spec)} hosts in {time.time() - started:.1f} s", file=sys.stderr)
    return document


def _start_cluster(
    run: RunDir, spec: list[LabHost], binaries: dict[str, Path], archives: list[images.Archive]
) -> tuple[hosts.KubeParts, controlplane.ControlPlane]:
    """etcd and the API server on the bridge, the scheduler and the controller manager
    started, the namespace of the device plugin's ConfigMap, a kubelet kubeconfig per host;
    what the hosts run of it, and the control plane."""
    started = time.time()
    plane = controlplane.ControlPlane(run.kube, GATEWAY)
    plane.start(binaries)
    # The pods' in-cluster address of the API server (the `kubernetes` Service), without kube-proxy.
    network.add_service_nat(
        controlplane.SERVICE_IP, controlplane.SERVICE_PORT, plane.address, plane.port
    )
    print(f"api server up in {time.time() - started:.1f} s", file=sys.stderr)
    # The controllers start now and are waited for after the hosts boot: their first sync
    # (a few seconds) overlaps the hosts' boot instead of adding to it.
    plane.start_controllers(binaries)
    # Where `gpuprov kube apply` puts the device plugin's ConfigMap; the chart makes it in a
    # real cluster, and the lab's plugin runs as a systemd unit instead.
    made = plane.kubectl("create", "namespace", manifests.DEFAULT_NAMESPACE)
    if made.returncode != 0:
        raise LabError(f"creating namespace {manifests.DEFAULT_NAMESPACE}: {made.stderr.strip()}")
    for host in spec:
        plane.kubeconfig(run.node_kubeconfig(host.name), controlplane.node_identity(host.name))
    print(f"control plane up in {time.time() - started:.1f} s", file=sys.stderr)
    vgpu_kubeconfig = plane.kubeconfig(
        run.kube / "vgpu-device-plugin.kubeconfig", vgpu_plugin_service.IDENTITY
    )
    parts = hosts.KubeParts(
        binaries["kubelet"],
        binaries[plugin_service.BUILD],
        tuple(archives),
        tuple(vgpu_plugin_service.binds().items()),
        vgpu_kubeconfig,
    )
    return parts, plane


def _queues_as_asked(run: RunDir, current: dict[str, Any], queues: str | None) -> bool:
    """The running lab runs the queue system asked for (None: none), all of its processes."""
    shown = queue_system.status(run.path, current.get("queues"))
    if queues is None:
        return shown is None
    return shown is not None and shown["system"] == queues and shown["running"]


def _restart_queues(run: RunDir, current: dict[str, Any], queues: str | None) -> dict[str, Any]:
    """The running lab with ``queues`` instead of the queue system it runs (None: none)."""
    recorded = current.get("queues")
    if recorded:
        print(f"stopping {recorded['system']}", file=sys.stderr)
    queue_system.stop(run.path)
    current["queues"] = None
    run.write_state(current)
    if queues is not None:
        current["queues"] = _start_queues(run, queues)
        run.write_state(current)
    return current


def _start_queues(run: RunDir, queues: str) -> dict[str, Any]:
    started = time.time()
    try:
        recorded = queue_system.start(run.path, queues, run.admin_kubeconfig, GATEWAY)
    except BaseException:
        # No webhook configuration left that nothing answers (they fail closed).
        queue_system.stop(run.path)
        raise
    print(f"{queues} up in {time.time() - started:.1f} s", file=sys.stderr)
    return recorded


def _wait_nodes_ready(run: RunDir, kube: dict[str, Any], names: list[str]) -> None:
    """Wait until the API server shows every host's Node Ready; warn (do not fail) past the
    time limit, naming the hosts and where their kubelet's log is."""
    deadline = time.monotonic() + NODES_READY_TIMEOUT
    while True:
        cluster = _cluster(run, kube, names)
        late = [n["name"] for n in cluster["nodes"] if not n["ready"]] if cluster["api"] else names
        if not late or time.monotonic() > deadline:
            break
        time.sleep(1)
    for name in late:
        print(
            f"warning: node {name} is not Ready after {NODES_READY_TIMEOUT:.0f} s; `ssh -F "
            f"{run.ssh_config} {name} journalctl -u kubelet` shows why",
            file=sys.stderr,
        )


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
    # Before the API server: the queue system's webhook configurations are deleted through it.
    queue_system.stop(run.path)
    # After the hosts: a kubelet that outlived its API server would only log errors.
    controlplane.stop(run.kube)
    services.stop_all(run)
    network.remove_all()
    left = hosts.mounts_under(run.path)
    if left:
        raise LabError(f"still mounted, not deleting {run.path}: {', '.join(left)}")
    shutil.rmtree(run.path, ignore_errors=True)


def _healthy(run: RunDir, current: dict[str, Any]) -> bool:
    if not (procs.alive(run.stuck_pid) and procs.alive(run.repo_pid)):
        return False
    if current.get("kube") and not controlplane.running(run.kube):
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
