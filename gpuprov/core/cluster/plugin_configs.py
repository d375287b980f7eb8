"""The NVIDIA device plugin config of a host as a dict, and the name it has in the ConfigMap.

Every host of one kind shares one named config; a node picks its config with the
``nvidia.com/device-plugin.config`` label (config-manager sidecar, k8s-device-plugin
cmd/config-manager).

>>> config_name({"version": "v1", "flags": {"migStrategy": "mixed"}})
'mig-mixed'
"""

from __future__ import annotations

import hashlib
from typing import Any

from gpuprov.core.hostfiles import device_plugin
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_VERSION,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
    MPS_ROOT,
)


def plugin_defaults() -> dict[str, Any]:
    """The config of whole cards: the plugin's own defaults, spelt out (``whole``)."""
    return {"version": DEVICE_PLUGIN_CONFIG_VERSION, "flags": {"migStrategy": "none"}}


def host_config(plan: HostPlan) -> dict[str, Any]:
    """The device plugin config (api/config/v1) the plan asks of ``plan``'s host: the same
    document the deploy writes on the host (``gpuprov.core.hostfiles.device_plugin``). A
    ``whole_card`` host gets no host file, which is the plugin's defaults: the ConfigMap spells
    those out (``migStrategy: none``) so the node's label names a real config.

    >>> host_config(plan.host("gpu-a100-01"))["sharing"]["timeSlicing"]["resources"]  # doctest: +SKIP
    [{'name': 'nvidia.com/gpu', 'replicas': 4}]
    """
    return device_plugin.document(plan) or plugin_defaults()


def config_name(config: dict[str, Any]) -> str:
    """A stable, readable name for ``config``, made of what sets it apart from the others.

    ``shared-r4`` (time-slicing x4, renamed to ``nvidia.com/gpu.shared``, one replica per
    container), ``shared-r4-norename`` (advertised as ``nvidia.com/gpu``), ``shared-r4-multi``
    (more than one replica per container allowed), ``shared-mps-r4`` (MPS x4; with
    ``-root-<hash>`` when its ``mpsRoot`` is not the chart's default), ``mig-mixed``,
    ``mig-single``, ``whole``. Each name is also a valid label value (at most 63 characters).

    >>> config_name({"flags": {"mpsRoot": "/run/nvidia/mps"}, "sharing": {"mps": {
    ...     "renameByDefault": True, "failRequestsGreaterThanOne": True,
    ...     "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}})
    'shared-mps-r4'
    """
    sharing = config.get("sharing", {})
    for key, prefix in (("mps", "shared-mps"), ("timeSlicing", "shared")):
        section = sharing.get(key)
        if not section:
            continue
        name = f"{prefix}-r{section['resources'][0]['replicas']}"
        if not section["renameByDefault"]:
            name += "-norename"
        if not section["failRequestsGreaterThanOne"]:
            name += "-multi"
        root = config["flags"].get("mpsRoot")
        if key == "mps" and root != MPS_ROOT:
            name += "-root-" + hashlib.sha256(str(root).encode()).hexdigest()[:8]
        return name
    strategy = config["flags"]["migStrategy"]
    return DEVICE_PLUGIN_DEFAULT_CONFIG if strategy == "none" else f"mig-{strategy}"
