"""The NVIDIA device plugin config of a host, typed, and the name it has in the ConfigMap.

Every host of one kind shares one named config; a node picks its config with the
``nvidia.com/device-plugin.config`` label (config-manager sidecar, k8s-device-plugin
cmd/config-manager). The configs are the same typed ``DevicePluginConfig`` the deploy writes on
the host (``gpuprov.core.hostfiles.device_plugin``), so the ConfigMap and the host file cannot
differ.

>>> config_name(DevicePluginConfig(mig_strategy="mixed"))
'mig-mixed'
"""

from __future__ import annotations

import hashlib

from gpuprov.core.hostfiles.device_plugin import DevicePluginConfig
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import DEVICE_PLUGIN_DEFAULT_CONFIG, MPS_ROOT


def plugin_defaults() -> DevicePluginConfig:
    """The config of whole cards: the plugin's own defaults, spelt out (``whole``)."""
    return DevicePluginConfig()


def host_config(plan: HostPlan) -> DevicePluginConfig:
    """The device plugin config (api/config/v1) the plan asks of ``plan``'s host: the config
    the deploy writes on the host. A ``whole_card`` host gets no host file, which is the
    plugin's defaults: the ConfigMap spells those out (``migStrategy: none``) so the node's
    label names a real config.

    >>> host_config(plan.host("gpu-a100-01")).time_slicing.replicas  # doctest: +SKIP
    4
    """
    return DevicePluginConfig.planned(plan) or plugin_defaults()


def config_name(config: DevicePluginConfig) -> str:
    """A stable, readable name for ``config``, made of what sets it apart from the others.

    ``shared-r4`` (time-slicing x4, renamed to ``nvidia.com/gpu.shared``, one replica per
    container), ``shared-r4-norename`` (advertised as ``nvidia.com/gpu``), ``shared-r4-multi``
    (more than one replica per container allowed), ``shared-mps-r4`` (MPS x4; with
    ``-root-<hash>`` when its ``mpsRoot`` is not the chart's default), ``mig-mixed``,
    ``mig-single``, ``whole``. Each name is also a valid label value (at most 63 characters).

    >>> from gpuprov.core.hostfiles.device_plugin import ReplicatedConfig
    >>> config_name(DevicePluginConfig(mps=ReplicatedConfig(True, True, 4),
    ...     mps_root="/run/nvidia/mps"))
    'shared-mps-r4'
    """
    for section, prefix in ((config.mps, "shared-mps"), (config.time_slicing, "shared")):
        if section is None:
            continue
        name = f"{prefix}-r{section.replicas}"
        if not section.rename_by_default:
            name += "-norename"
        if not section.fail_requests_greater_than_one:
            name += "-multi"
        if section is config.mps and config.mps_root != MPS_ROOT:
            name += "-root-" + hashlib.sha256(str(config.mps_root).encode()).hexdigest()[:8]
        return name
    strategy = config.mig_strategy
    return DEVICE_PLUGIN_DEFAULT_CONFIG if strategy == "none" else f"mig-{strategy}"
