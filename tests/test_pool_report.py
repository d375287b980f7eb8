"""The verify table of a fleet: the same finding on 4 or more hosts of one pool is one line
(gpuprov.core.pool_report); up to 3 it stays one row per host, as the lab's inventories show it.
The real-API-server run at 500 nodes is tests/test_verify_fleet.py."""

from __future__ import annotations

from gpuprov.cli.verify import hosts_summary, report_text
from gpuprov.core.findings import Finding
from gpuprov.core.pool_report import REPEAT_FROM, pooled


def pods(host: str, found: str = "pods: 250", node: str | None = None) -> Finding:
    return Finding(
        host,
        None,
        "kube-pods",
        "pods: 110",
        found,
        f"node {node or host}: check the kubelet's maxPods (kubelet_max_pods)",
    )


def results_of(*findings: Finding, ok: int = 0) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {f"fine-{i}": [] for i in range(ok)}
    for f in findings:
        out.setdefault(f.host, []).append(f)
    return out


def test_three_hosts_with_the_same_drift_keep_a_row_each_and_four_share_one_line():
    three = results_of(*(pods(f"gpu-{i}") for i in range(3)))
    singles, repeats = pooled(three, dict.fromkeys(three, "mig"))
    assert (len(singles), repeats) == (3, [])
    text = report_text(three, dict.fromkeys(three, "mig"))
    assert text.splitlines()[0].split() == ["host", "gpu", "check", "expected", "found", "hint"]
    assert "pool " not in text

    four = results_of(*(pods(f"gpu-{i}") for i in range(REPEAT_FROM)))
    singles, [repeat] = pooled(four, dict.fromkeys(four, "mig"))
    assert singles == []
    assert repeat.hosts == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
    assert repeat.hint == "node NODE: check the kubelet's maxPods (kubelet_max_pods)"


def test_the_same_drift_in_two_pools_is_a_line_per_pool_with_a_count_per_pool():
    results = results_of(*(pods(f"gpu-{i}") for i in range(8)), ok=2)
    pools = {name: "shared" if name[-1] in "0246" else "mig" for name in results}
    pools.update({"fine-0": "mig", "fine-1": "whole_card"})
    _, repeats = pooled(results, pools)
    assert [(r.pool, len(r.hosts)) for r in repeats] == [("shared", 4), ("mig", 4)]
    lines = report_text(results, pools).splitlines()
    assert lines[-4:] == [
        "pool mig, 5 hosts: 1 ok, 4 drift, 0 unreachable",  # pools in report order
        "pool whole_card, 1 host: 1 ok, 0 drift, 0 unreachable",
        "pool shared, 4 hosts: 0 ok, 4 drift, 0 unreachable",
        "10 hosts: 2 ok, 8 drift (gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, … +3), 0 unreachable",
    ]


def test_a_different_found_value_or_gpu_is_another_line_and_rare_ones_stay_rows():
    results = results_of(
        *(pods(f"gpu-{i}") for i in range(4)),
        *(pods(f"gpu-{i}", "pods: 300") for i in range(4, 8)),
        pods("gpu-8", "pods: 90"),
    )
    for i in range(4):
        results[f"gpu-{i}"].append(Finding(f"gpu-{i}", i % 2, "mig-mode", "enabled", "off", "x"))
    singles, repeats = pooled(results, dict.fromkeys(results, "mig"))
    assert [(r.check, r.found, len(r.hosts)) for r in repeats] == [
        ("kube-pods", "pods: 250", 4),
        ("kube-pods", "pods: 300", 4),
    ]
    # Two hosts each for GPU 0 and GPU 1, and the one host at 90: per host, in report order.
    assert [(f.host, f.check) for f in singles] == [
        ("gpu-0", "mig-mode"),
        ("gpu-1", "mig-mode"),
        ("gpu-2", "mig-mode"),
        ("gpu-3", "mig-mode"),
        ("gpu-8", "kube-pods"),
    ]


def test_only_a_hosts_own_names_are_read_as_node_in_its_hint():
    # Node names set by kube_node_name; gpu-1's hint names gpu-10, which is not its own.
    names = {f"gpu-{i}": f"gpu-{i}.example" for i in range(4)}
    results = results_of(*(pods(h, node=n) for h, n in names.items()))
    _, [repeat] = pooled(results, dict.fromkeys(results, "mig"), names)
    assert repeat.hint == "node NODE: check the kubelet's maxPods (kubelet_max_pods)"

    ending = [Finding(f"gpu-{i}", None, "kube-node", "", "", f"join gpu-{i}.") for i in range(4)]
    _, [repeat] = pooled(results_of(*ending), dict.fromkeys(names, "mig"))
    assert repeat.hint == "join NODE."

    # gpu-10 is another host's name, not a part of gpu-1's: no two hints read the same.
    other = [Finding(f"gpu-{i}", None, "kube-node", "", "", f"gpu-{i}0 first") for i in range(4)]
    singles, repeats = pooled(results_of(*other), dict.fromkeys(names, "mig"))
    assert (len(singles), repeats) == (4, [])


def test_the_summary_names_five_hosts_per_state_then_counts_the_rest():
    results = results_of(*(pods(f"gpu-{i}") for i in range(7)))
    assert hosts_summary(results) == (
        "7 hosts: 0 ok, 7 drift (gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, … +2), 0 unreachable"
    )
