"""The lab's chart mode: each host's device plugin chooses its config as the chart's does, by its
node label, through NVIDIA's real config-manager beside it.

``start`` puts, on every host it is given (default: all), config-manager (shared/bin's v0.20.0,
sha256-checked like the plugin: ``plugin_service.binary``) as the chart's sidecar and its init
container (``plugin_service.install_config_manager``: ``--oneshot`` before the plugin, then the
long-running sidecar with SIGHUP to ``nvidia-device-plugin``), with the node's own kubeconfig
(the kubelet's), ``--default-config`` the rendered values' default (``whole``).

Its source directory is the device plugin ConfigMap as ``gpuprov kube apply`` left it in the API
server (``gpuprov-device-plugin-configs``, one file per key): the chart mounts that ConfigMap as a
volume, which the kubelet refreshes from the API; the lab reads the ConfigMap from the API
instead, at each ``start`` (call it again after a ``kube apply`` that changed the ConfigMap's
data; one that only moves labels needs nothing, as every config is already there).

The deploy's plugin config file is kept aside while the mode runs (config-manager makes that path
a symlink into the source directory) and put back by ``stop``, which ends the mode.

>>> SAVED.endswith(".gpuprov-lab-deploy")
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuprov.core.cluster.manifests import DEFAULT_NAMESPACE
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_PATH,
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
    DEVICE_PLUGIN_UNIT,
)
from gpuprov_lab import plugin_service

BUILD = "config-manager"  # shared/bin/<BUILD>.xz
SAVED = f"{DEVICE_PLUGIN_CONFIG_PATH}.gpuprov-lab-deploy"  # the deploy's file, while the mode runs
SIDECAR = Path(plugin_service.CONFIG_MANAGER_UNIT).name


def configmap_data(lab: Any) -> dict[str, str]:
    """The device plugin ConfigMap's data (config name -> YAML) as the API server has it."""
    got = lab.kubectl(
        "get", "configmap", DEVICE_PLUGIN_CONFIGMAP, "-n", DEFAULT_NAMESPACE, "-o", "json"
    )
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)["data"]


def start(lab: Any, hosts: list[str] | None = None) -> None:
    """The chart mode on ``hosts`` (default: every lab host): config-manager installed beside
    the plugin, the plugin restarted through its init step. ``gpuprov kube apply`` must have
    run (the ConfigMap and the labels)."""
    binary = plugin_service.binary(BUILD)
    configs = configmap_data(lab)
    for host in hosts or lab.names:
        root = lab.run_dir.host(host).root
        deployed = root / DEVICE_PLUGIN_CONFIG_PATH.lstrip("/")
        if deployed.is_file() and not deployed.is_symlink():
            deployed.replace(root / SAVED.lstrip("/"))  # nothing lost: ``stop`` puts it back
        # A config-manager still running from an earlier start keeps its binary busy for writes.
        (root / plugin_service.CONFIG_MANAGER.lstrip("/")).unlink(missing_ok=True)
        plugin_service.install_config_manager(
            root, binary, host, configs, DEVICE_PLUGIN_DEFAULT_CONFIG
        )
        lab.run(
            host,
            f"systemctl daemon-reload && systemctl restart {DEVICE_PLUGIN_UNIT} && "
            f"systemctl restart {SIDECAR}",
        )


def stop(lab: Any, hosts: list[str] | None = None) -> None:
    """The mode off: config-manager gone, the deploy's config file back, the plugin restarted."""
    drop_in = f"{plugin_service.UNIT}.d/{plugin_service.CONFIG_MANAGER_INIT_DROP_IN}"
    for host in hosts or lab.names:
        lab.run(
            host,
            f"systemctl disable --now {SIDECAR}; rm -f {drop_in} {plugin_service.CONFIG_MANAGER_UNIT}"
            f" && rm -f {DEVICE_PLUGIN_CONFIG_PATH}"
            f" && if [ -e {SAVED} ]; then mv {SAVED} {DEVICE_PLUGIN_CONFIG_PATH}; fi"
            f" && systemctl daemon-reload && systemctl restart {DEVICE_PLUGIN_UNIT}",
        )
