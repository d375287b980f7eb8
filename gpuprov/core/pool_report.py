"""A fleet's verify report by pool: the same drift on many hosts of one pool is one line.

A pool is the hosts of one mode group (``HostPlan.mode``: the ``gpuprov.io/pool`` label
``gpuprov kube render`` gives their nodes). Findings that are the same on ``REPEAT_FROM`` or more
hosts of one pool (same check, GPU, expected, found, and the same hint once each host's own
name in it is read as ``NODE``) become one ``Repeat``; the rest are shown per host as before.
The JSON report keeps every host's findings; this only shapes the table.

>>> drift = [Finding(f"gpu-{i}", None, "kube-pods", "pods: 110", "pods: 250",
...                  f"node gpu-{i}: check the kubelet's maxPods") for i in range(5)]
>>> singles, [repeat] = pooled({f.host: [f] for f in drift}, dict.fromkeys(
...     (f.host for f in drift), "shared"))
>>> singles, repeat.line()
([], 'pool shared, 5 hosts: kube-pods: expected pods: 110, found pods: 250 (gpu-0, gpu-1, gpu-2, … +2)')
>>> repeat.hint
"node NODE: check the kubelet's maxPods"
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuprov.core.findings import Finding

# From this many hosts of one pool with the same finding, it is one line. Up to 3 the rows stay
# per host, each with its own hint: the lab's and the tests' inventories (3 hosts) keep their
# table exactly, and 3 rows of one finding still read at a glance. From 4 on, more rows add
# only names (each row of the table is 2-6 lines once its hint wraps): at fleet size one drift
# on 50 nodes is one line, not 250.
REPEAT_FROM = 4
NAMED = 3  # hosts a repeat names before "… +N"
STATUSES = ("ok", "drift", "unreachable")


def host_status(findings: Iterable[Finding]) -> str:
    """``ok``, ``drift`` or ``unreachable`` for one host's findings."""
    findings = list(findings)
    if any(f.check == "unreachable" for f in findings):
        return "unreachable"
    return "drift" if findings else "ok"


@dataclass(frozen=True)
class Repeat:
    """One finding shared by ``hosts`` of ``pool``; ``hint`` says ``NODE`` for each one's name."""

    pool: str
    check: str
    gpu: int | None
    expected: str
    found: str
    hint: str
    hosts: tuple[str, ...]

    def line(self) -> str:
        gpu = f" GPU {self.gpu}" if self.gpu is not None else ""
        return (
            f"pool {self.pool}, {len(self.hosts)} hosts: {self.check}{gpu}: expected "
            f"{self.expected}, found {self.found} ({named(self.hosts, NAMED)})"
        )


def named(names: Sequence[str], count: int) -> str:
    """The first ``count`` of ``names``, then how many more.

    >>> named(["a", "b", "c"], 2), named(["a"], 2)
    ('a, b, … +1', 'a')
    """
    shown = ", ".join(names[:count])
    return f"{shown}, … +{len(names) - count}" if len(names) > count else shown


def pooled(
    results: Mapping[str, Sequence[Finding]],
    pools: Mapping[str, str],
    node_names: Mapping[str, str] | None = None,
) -> tuple[list[Finding], list[Repeat]]:
    """The findings to show per host (in report order) and the repeats (in order of first
    appearance); ``pools`` is host -> pool, ``node_names`` host -> its node's name where that
    is not the host's (``kube_node_name``)."""
    node_names = node_names or {}
    keyed: dict[tuple, list[tuple[str, int]]] = {}
    for host, findings in results.items():
        if not findings:
            continue
        generic = _generic(host, node_names.get(host, host))
        for i, f in enumerate(findings):
            key = (pools.get(host, ""), f.check, f.gpu, f.expected, f.found, generic(f.hint))
            keyed.setdefault(key, []).append((host, i))
    repeats = []
    single: set[tuple[str, int]] = set()
    for (pool, check, gpu, expected, found, hint), members in keyed.items():
        hosts = tuple(dict.fromkeys(host for host, _ in members))
        if len(hosts) >= REPEAT_FROM:
            repeats.append(Repeat(pool, check, gpu, expected, found, hint, hosts))
        else:
            single.update(members)
    singles = [
        f
        for host, findings in results.items()
        for i, f in enumerate(findings)
        if (host, i) in single
    ]
    return singles, repeats


def pool_counts(
    results: Mapping[str, Sequence[Finding]], pools: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Hosts per status in each pool, pools in report order.

    >>> pool_counts({"a": [], "b": [Finding("b", None, "kube-pods", "", "", "")]},
    ...             {"a": "mig", "b": "mig"})
    {'mig': {'ok': 1, 'drift': 1, 'unreachable': 0}}
    """
    counts: dict[str, dict[str, int]] = {}
    for host, findings in results.items():
        pool = counts.setdefault(pools.get(host, ""), dict.fromkeys(STATUSES, 0))
        pool[host_status(findings)] += 1
    return counts


def _generic(host: str, node: str):
    """A hint with this host's name and node name (whole names, not parts of others) read as
    ``NODE``; one pattern for every host, so a fleet's report compiles nothing per host."""
    names = {host, node}

    def swap(match: re.Match) -> str:
        name = match[0].rstrip(".")  # a name ending a sentence
        return "NODE" + match[0][len(name) :] if name in names else match[0]

    return lambda hint: _NAME.sub(swap, hint)


# A run of the characters host and node names are made of (RFC 1123 names, inventory names).
_NAME = re.compile(r"[\w.@-]+")
