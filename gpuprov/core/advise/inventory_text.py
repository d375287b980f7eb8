"""The proposal as a pyinfra inventory file, in the shape of ``inventories/example.py``: one
``(hosts, data)`` tuple per mode group, group data for what most of its hosts share, host data
only where a host differs.

>>> print(literal({"mig_layout_by_gpu": {3: {"3g.40gb": 2}}, "time_slicing_replicas": 4}))
{"mig_layout_by_gpu": {3: {"3g.40gb": 2}}, "time_slicing_replicas": 4}
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from typing import Any

from gpuprov.core.advise.proposal import Proposal, ProposedHost
from gpuprov.core.errors import printable
from gpuprov.core.memory_budget import gib

MODE_ORDER = ("whole_card", "shared", "mig")


def literal(value: Any) -> str:
    """A Python literal for plain data: dicts (int keys kept), lists, strings, numbers."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def group_data(hosts: list[ProposedHost], mode: str, model: str) -> tuple[dict, dict[str, dict]]:
    """The group data of one mode group, and each host's own data (only what differs)."""
    data: dict[str, Any] = {"gpu_model": model, "gpu_count": _most(h.gpu_count for h in hosts)}
    per_host: dict[str, dict] = {h.name: {} for h in hosts}
    for host in hosts:
        if host.gpu_count != data["gpu_count"]:
            per_host[host.name]["gpu_count"] = host.gpu_count
    if mode == "shared":
        for key, of in (
            ("time_slicing_replicas", lambda h: h.replicas),
            ("memory_per_share_gib", lambda h: h.share_gib),
            ("sharing_strategy", lambda h: h.strategy),
        ):
            data[key] = _most(of(h) for h in hosts)
            for host in hosts:
                if of(host) != data[key]:
                    per_host[host.name][key] = of(host)
    if mode == "mig":
        layouts = [g.layout() for h in hosts for g in h.gpus if g.instances]
        default = (
            json.loads(_most(json.dumps(x, sort_keys=True) for x in layouts)) if layouts else {}
        )
        data["mig_layout"] = default
        data["mig_strategy"] = "mixed"
        for host in hosts:
            by_gpu = {
                g.index: g.layout() for g in host.gpus if g.instances and g.layout() != default
            }
            if by_gpu:
                per_host[host.name]["mig_layout_by_gpu"] = by_gpu
    return data, per_host


def render(proposal: Proposal, header: str) -> str:
    """The inventory file's text; ``header`` says where the usage came from."""
    model = proposal.model.alias
    lines = [
        '"""Proposed by `gpuprov advise` from observed GPU usage; review it before you deploy.',
        "",
        "    gpuprov plan THIS_FILE",
        "    gpuprov advise --check THIS_FILE USAGE...   # the usage replayed on this plan",
        '"""',
        "",
        # A comment, not the docstring: file names are the user's, and one line each
        # (printable) cannot end a comment, so nothing in them becomes code.
        *(f"# {line}" for line in textwrap.wrap(printable(header), 98)),
    ]
    for mode in MODE_ORDER:
        hosts = [h for h in proposal.hosts if h.mode == mode]
        if not hosts:
            continue
        data, per_host = group_data(hosts, mode, model)
        lines += ["", f"# {_summary(mode, hosts, data)}", f"{mode} = (", "    ["]
        for host in hosts:
            entry = literal(host.name)
            if per_host[host.name]:
                entry = f"({entry}, {literal(per_host[host.name])})"
            note = "  # free: no observed workload needs it" if host.free else ""
            lines.append(f"        {entry},{note}")
        lines += ["    ],", f"    {literal(data)},", ")"]
    return "\n".join(lines) + "\n"


def _summary(mode: str, hosts: list[ProposedHost], data: dict) -> str:
    used = sum(h.gpus_used for h in hosts)
    total = sum(h.gpu_count for h in hosts)
    workloads = len({d.name for h in hosts for g in h.gpus for d in g.placed})
    text = f"{len(hosts)} hosts, {used} of {total} GPUs in use by {workloads} workloads"
    if mode == "shared":
        text += (
            f"; {data['time_slicing_replicas']} shares of {gib(data['memory_per_share_gib'] * 1024)}"
            f" GiB per GPU ({data['sharing_strategy']}) on most hosts"
        )
    if mode == "mig":
        text += f"; most GPUs {' + '.join(f'{c} x {p}' for p, c in data['mig_layout'].items())}"
    return text


def _most(values) -> Any:
    """The most common value (the first seen of equals)."""
    return Counter(values).most_common(1)[0][0]
