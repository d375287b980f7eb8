"""A Node Problem Detector config that turns a critical XID in the kernel log into a node
condition, so a remedy system (or an operator) can cordon the node between verify runs.

NPD's system log monitor reads ``/dev/kmsg`` with its ``kmsg`` plugin and matches each rule's
``pattern`` against a kernel message; a ``permanent`` rule sets its ``condition`` on the Node, a
``temporary`` one records an Event (kubernetes/node-problem-detector
pkg/systemlogmonitor/README.md and config/kernel-monitor.json; tests/data/npd has that example).
Its patterns end in ``.*`` because a rule must match the whole message, as in NPD's own
examples. One permanent and one temporary rule per critical XID, named ``XidNN``.

>>> config([79])["rules"][1]["pattern"]
'NVRM: Xid \\\\(PCI:[0-9a-fA-F:.]+\\\\): 79,.*'
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gpuprov.host.contract import (
    KERNEL_LOG_PATH,
    NPD_CONDITION,
    NPD_CONFIGMAP,
    NPD_CONFIGMAP_KEY,
    NPD_NAMESPACE,
)
from gpuprov.host.health import xid

SOURCE = "gpuprov-gpu-xid-monitor"


def config(critical: Iterable[int]) -> dict[str, Any]:
    """The system log monitor config for the XID codes ``critical``."""
    rules: list[dict[str, Any]] = []
    for code in sorted(set(critical)):
        pattern = rf"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): {code},.*"
        reason = f"Xid{code}"
        rules.append({"type": "temporary", "reason": reason, "pattern": pattern})
        rules.append(
            {"type": "permanent", "condition": NPD_CONDITION, "reason": reason, "pattern": pattern}
        )
    return {
        "plugin": "kmsg",
        "logPath": KERNEL_LOG_PATH,  # NPD's kmsg plugin reads the same device
        "lookback": "5m",
        "bufferSize": 10,
        "source": SOURCE,
        "metricsReporting": True,
        "conditions": [
            {
                "type": NPD_CONDITION,
                "reason": "NoCriticalGPUXid",
                "message": "no critical GPU XID in the kernel log: "
                + ", ".join(f"{code} ({xid.meaning(code)})" for code in sorted(set(critical))),
            }
        ],
        "rules": rules,
    }


def config_map(critical: Iterable[int]) -> dict[str, Any]:
    """The ConfigMap that carries ``config(critical)`` for NPD's DaemonSet to mount."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NPD_CONFIGMAP, "namespace": NPD_NAMESPACE},
        "data": {NPD_CONFIGMAP_KEY: json.dumps(config(critical), indent=2) + "\n"},
    }
