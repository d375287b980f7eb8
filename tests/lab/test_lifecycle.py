"""`gpuprov lab` as a command: root only, one lab at a time, and `down` leaves nothing behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from gpuprov_lab import controlplane, hosts, network, procs
from gpuprov_lab.controlplane import API_PORT
from gpuprov_lab.kubelet_unit import KUBELET
from gpuprov_lab.plugin_service import PROGRAM
from gpuprov_lab.spec import GATEWAY

pytestmark = pytest.mark.lab


def gpuprov(lab, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
    argv = [str(lab.bin / "gpuprov"), "lab", *args] if lab else ["gpuprov", "lab", *args]
    if user:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_up_as_non_root_says_it_needs_root_and_exits_2(lab):
    result = gpuprov(lab, "up", user="65534")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: gpuprov lab up: needs root (it creates network namespaces, overlay mounts and "
        "containers); run it with sudo"
    ]


def test_second_up_with_other_hosts_refuses_and_leaves_the_lab_alone(lab):
    boot_ids = {h: lab.run(h, "cat /proc/sys/kernel/random/boot_id").stdout for h in lab.names}
    refused = gpuprov(lab, "up", "--hosts", "2")
    assert refused.returncode == 2
    assert "a lab is already running with other hosts" in refused.stderr
    assert "Traceback" not in refused.stderr
    same = gpuprov(lab, "up")
    assert same.returncode == 0, same.stderr
    assert "a lab with this spec is already up; reusing it" in same.stderr
    assert {
        h: lab.run(h, "cat /proc/sys/kernel/random/boot_id").stdout for h in lab.names
    } == boot_ids
    status = json.loads(gpuprov(lab, "status", "--format", "json").stdout)
    assert status["state"] == "up"
    assert [h["name"] for h in status["hosts"]] == lab.names


def test_status_shows_the_nodes_as_the_api_server_sees_them(lab):
    status = json.loads(gpuprov(lab, "status", "--format", "json").stdout)
    assert status["kube"]["api"] is True
    assert status["kube"]["kubeconfig"] == str(lab.run_dir.admin_kubeconfig)
    assert [(n["name"], n["ready"]) for n in status["kube"]["nodes"]] == [
        (name, True) for name in lab.names
    ]
    text = gpuprov(lab, "status").stdout
    assert f"kubeconfig {lab.run_dir.admin_kubeconfig}" in text
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("lab-"):
            rows.setdefault(line.split()[0], line.split())  # the node table comes first
    assert all(rows[name][1] == "yes" for name in lab.names), text


@pytest.mark.lab_down
def test_down_leaves_no_process_mount_namespace_or_link(lab):
    run = lab.run_dir
    pidfiles = run.pidfiles()
    pids = [procs.read(f) for f in pidfiles]
    # repository server, stuck mirror, etcd, API server, scheduler, controller manager; each
    # host's launcher and nspawn
    assert len(pids) == 6 + 2 * len(lab.hosts) and None not in pids
    ports = lab.kube["ports"]
    assert sorted(ports) == sorted([*controlplane.COMPONENTS, "etcd-peer"])
    assert set(ports.values()) <= _listening_ports(GATEWAY) | _listening_ports("127.0.0.1")
    # Each host's kubelet and plugin, started inside the hosts (descendants of their nspawn); the
    # plugin runs by its bare name, as in the chart's image (plugin_service.launcher).
    node_parts = _descendants_running([p for p in pids if p is not None], {KUBELET, PROGRAM})
    assert len(node_parts) == 2 * len(lab.hosts), node_parts

    assert network.nat_table_exists()
    lab.stop()

    assert [p for p in pids if p is not None and _running(p)] == []
    assert [p for p in node_parts if _running(p)] == []
    assert API_PORT not in _listening_ports(GATEWAY)  # the API server's port is free again
    # and every component's (the controllers' ports are on 127.0.0.1, chosen free at start)
    assert set(ports.values()) & _listening_ports("127.0.0.1") == set()
    assert hosts.mounts_under(run.path) == []
    assert network.leftover_namespaces() == [] and network.leftover_veths() == []
    assert not network.bridge_exists()
    assert not network.nat_table_exists()  # the kubernetes Service's DNAT of this slot
    assert not run.path.exists()  # certificates, kubeconfigs, etcd's data, logs
    # The controllers keep their serving certificates in memory (no --cert-dir given), and the
    # API server has its own: none of them wrote the default /var/run/kubernetes.
    assert not Path("/var/run/kubernetes").exists()
    again = gpuprov(lab, "down")
    assert again.returncode == 0, again.stderr
    assert json.loads(gpuprov(lab, "status", "--format", "json").stdout)["state"] == "down"


def _listening_ports(address: str) -> set[int]:
    """The TCP ports something listens on at ``address`` (or on every address) in this network
    namespace; a lab of another slot listens on its own gateway address."""
    packed = socket.inet_aton(address)[::-1].hex().upper()  # /proc/net/tcp: little-endian hex
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, port = fields[1].split(":")
        if fields[3] == "0A" and local in (packed, "00000000"):  # LISTEN
            ports.add(int(port, 16))
    for line in Path("/proc/net/tcp6").read_text().splitlines()[1:]:
        fields = line.split()
        local, port = fields[1].rsplit(":", 1)
        if fields[3] == "0A" and set(local) == {"0"}:  # LISTEN on every address
            ports.add(int(port, 16))
    return ports


def _descendants_running(roots: list[int], argv0s: set[str]) -> list[int]:
    """The processes below ``roots`` whose ``argv[0]`` is one of ``argv0s``."""
    parents, found = {}, []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
            except OSError:
                continue
            parents[int(proc.name)] = int(stat[1])
            if argv0 in argv0s:
                found.append(int(proc.name))
    below = []
    for pid in found:
        ancestor = pid
        while ancestor in parents and ancestor not in roots:
            ancestor = parents[ancestor]
        if ancestor in roots:
            below.append(pid)
    return below


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and os.path.exists(f"/proc/{pid}")
