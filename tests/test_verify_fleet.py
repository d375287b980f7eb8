"""`gpuprov verify --kubeconfig --cluster-only` of a fleet in a real API server: 500 kwok Nodes
that show exactly what a generated plan says (``gpuprov_lab.fleet``: the three mode groups),
then 50 of them drifted, 30 in pool shared (allocatable lowered through the status
subresource) and 20 in pool mig (their pool label removed).

The node list is read in pages (the list API's ``limit`` and ``continue``) through the real
kubectl, and the table shows each repeated drift once per pool while the JSON names every
node. How long it takes at 5,000 nodes is measured in bench/verify_fleet.py, not here.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time

import lab_consumers
import pytest
from click.testing import CliRunner
from gpuprov_lab import fleet, kwok
from kube_cluster import control_plane

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.controller.kube.kubectl import NODE_FIELDS, Kubectl
from gpuprov.core.plan import build

N = 500
LOWERED, UNLABELLED = 30, 20
SHARED = "nvidia.com/gpu.shared"

# Records each call gpuprov makes, then runs the real kubectl with it.
RECORDING_KUBECTL = f"""\
#!{sys.executable}
import json, os, sys
with open(os.environ["KUBECTL_CALLS"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
os.execv(os.environ["REAL_KUBECTL"], ["kubectl", *sys.argv[1:]])
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The control plane, kwok, the inventory and its plan, with a matching Node per host."""
    lab_consumers.require_built(kwok)
    plane = control_plane()
    handle = None
    try:
        # Leases renewed every 150 s, not 10 s: nothing here reads them, and 500 renewals a
        # minute would only load the machine.
        handle = kwok.start(
            plane.admin_kubeconfig, lab_consumers.workdir("kwok-fleet"), lease_seconds=600
        )
        inventory = fleet.write_inventory(tmp_path_factory.mktemp("fleet"), N)
        plan = build(load(str(inventory)))
        fleet.create(plane.admin_kubeconfig, fleet.nodes(plan))
        deadline = time.monotonic() + 300
        while kwok.ready_nodes(plane.admin_kubeconfig) != (N, N):
            assert time.monotonic() < deadline, kwok.ready_nodes(plane.admin_kubeconfig)
            time.sleep(2)
        yield plane, inventory, plan
    finally:
        if handle:
            handle.stop()
        plane.stop()


def verify(inventory, kubeconfig, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["verify", str(inventory), "--kubeconfig", str(kubeconfig), "--cluster-only", *args]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_a_fleet_matching_its_plan_verifies_clean_in_one_summary_line(cluster):
    plane, inventory, _ = cluster
    code, out = verify(inventory, plane.admin_kubeconfig)
    assert code == 0, out
    assert out == f"{N} hosts: {N} ok, 0 drift, 0 unreachable\n"


def test_the_node_list_is_read_in_pages_each_node_cut_to_what_gpuprov_reads(
    cluster, tmp_path, monkeypatch
):
    plane, _, plan = cluster
    calls = tmp_path / "calls.jsonl"
    shim = tmp_path / "bin" / "kubectl"
    shim.parent.mkdir()
    shim.write_text(RECORDING_KUBECTL)
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("KUBECTL_CALLS", str(calls))
    monkeypatch.setenv("REAL_KUBECTL", str(plane.kubectl_path))
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")

    nodes = Kubectl(str(plane.admin_kubeconfig)).nodes(page=64)

    assert sorted(nodes) == sorted(h.name for h in plan.hosts)
    paths = [json.loads(line)[-1] for line in calls.read_text().splitlines()]
    assert len(paths) == -(-N // 64)  # 8 list calls
    assert paths[0] == "/api/v1/nodes?limit=64"
    assert all(p.startswith("/api/v1/nodes?limit=64&continue=") for p in paths[1:])
    node = nodes["gpu-00000"]
    assert {part: sorted(fields) for part, fields in node.items()} == {
        "metadata": ["annotations", "labels", "name"],
        "spec": ["taints"],
        "status": ["allocatable", "capacity"],
    }
    assert set(node) == set(NODE_FIELDS)
    assert node["status"]["allocatable"][SHARED] == "32"


def test_drift_on_50_nodes_is_exit_1_every_node_named_in_json_one_line_per_pool_in_the_table(
    cluster,
):
    """Runs last: it leaves the 50 nodes drifted."""
    plane, inventory, plan = cluster
    shared = [h.name for h in plan.hosts if h.mode == "shared"]
    mig = [h.name for h in plan.hosts if h.mode == "mig"]
    lowered, unlabelled = shared[:LOWERED], mig[:UNLABELLED]
    assert plan.host(lowered[0]).resources[SHARED] == 32
    fleet.set_allocatable(plane.admin_kubeconfig, lowered, SHARED, "28")
    fleet.remove_label(plane.admin_kubeconfig, unlabelled, "gpuprov.io/pool")

    code, out = verify(inventory, plane.admin_kubeconfig, "--format", "json")
    assert code == 1
    hosts = {h["name"]: h for h in json.loads(out)["hosts"]}
    assert len(hosts) == N
    assert {n for n, h in hosts.items() if h["status"] != "ok"} == {*lowered, *unlabelled}
    for name in lowered:
        [finding] = hosts[name]["findings"]
        assert (finding["check"], finding["expected"], finding["found"]) == (
            "kube-allocatable",
            f"{SHARED}: 32",
            f"{SHARED}: 28",
        )
        assert finding["hint"].startswith(f"node {name}: ")
    for name in unlabelled:
        [finding] = hosts[name]["findings"]
        assert (finding["check"], finding["expected"], finding["found"]) == (
            "kube-label",
            "gpuprov.io/pool=mig",
            "no label gpuprov.io/pool",
        )

    code, out = verify(inventory, plane.admin_kubeconfig)
    assert code == 1
    pools = {mode: sum(h.mode == mode for h in plan.hosts) for mode in ("shared", "mig")}
    first = ", ".join(lowered[:3])
    drifted = [h.name for h in plan.hosts if h.name in {*lowered, *unlabelled}]
    assert out.splitlines() == [
        f"pool shared, {LOWERED} hosts: kube-allocatable: expected {SHARED}: 32, found",
        f"    {SHARED}: 28 ({first}, … +{LOWERED - 3})",
        "    hint: node NODE: check the device plugin on the host (running, its config) and that it",
        "    registered with the kubelet",
        f"pool mig, {UNLABELLED} hosts: kube-label: expected gpuprov.io/pool=mig, found no label "
        "gpuprov.io/pool",
        f"    ({', '.join(unlabelled[:3])}, … +{UNLABELLED - 3})",
        "    hint: run `gpuprov kube apply` with this inventory",
        "",
        f"pool shared, {pools['shared']} hosts: {pools['shared'] - LOWERED} ok, {LOWERED} drift, "
        "0 unreachable",
        f"pool mig, {pools['mig']} hosts: {pools['mig'] - UNLABELLED} ok, {UNLABELLED} drift, "
        "0 unreachable",
        f"pool whole_card, {N - pools['shared'] - pools['mig']} hosts: "
        f"{N - pools['shared'] - pools['mig']} ok, 0 drift, 0 unreachable",
        f"{N} hosts: {N - 50} ok, 50 drift ({', '.join(drifted[:5])}, … +45), 0 unreachable",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "--cluster-only: needs --kubeconfig and no --snapshot-dir"),
        (["--kubeconfig", "k", "--snapshot-dir", "."], "needs --kubeconfig and no --snapshot-dir"),
        (["--kubeconfig", "k", "--cordon-unhealthy"], "--cordon-unhealthy: needs --kubeconfig"),
    ],
)
def test_cluster_only_without_a_kubeconfig_or_with_host_reads_is_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "inv.py"), "--cluster-only", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ")
    assert message in result.output
