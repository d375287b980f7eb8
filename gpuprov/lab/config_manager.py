"""NVIDIA's real ``config-manager`` in a lab host, beside the real device plugin.

The device plugin chart runs it as a sidecar: it watches its node's
``nvidia.com/device-plugin.config`` label through the API server, points the plugin's config
file at ``<srcdir>/<label value>`` (a symlink) and sends the plugin SIGHUP, which makes the
plugin re-read it. Here it is a systemd unit: ``CONFIG_DIR`` holds the device plugin ConfigMap's
data, one file per key, as the chart's ConfigMap volume would; the plugin's config file
(``DEVICE_PLUGIN_CONFIG_PATH``) is the symlink it manages.

Flags and their meaning: ``cmd/config-manager/main.go`` of NVIDIA/k8s-device-plugin
(https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/cmd/config-manager/main.go).
It finds the process to signal by comparing each process's ``argv[0]`` with
``--process-to-signal`` (its ``findPidToSignal``), so that is the plugin unit's ``ExecStart``
path, not a bare name. It reads the Node with the node's own kubeconfig (the kubelet's): the
Node authorizer lets a node get, list and watch its own Node object, which is all
config-manager does (a watch with ``fieldSelector=metadata.name=<node>``); the chart gives it a
service account with the same rights on nodes.

>>> "--node-label=nvidia.com/device-plugin.config" in unit("node-1", "whole")
True
"""

from __future__ import annotations

from pathlib import Path

from gpuprov.contract import DEVICE_PLUGIN_CONFIG_LABEL, DEVICE_PLUGIN_CONFIG_PATH
from gpuprov.lab import device_plugin, kubelet

BINARY = "/usr/local/bin/config-manager"
UNIT = "/etc/systemd/system/nvidia-device-plugin-config-manager.service"
CONFIG_DIR = "/etc/gpuprov-lab/device-plugin-configs"  # the ConfigMap's data, as mounted


def unit(node: str, default_config: str) -> str:
    """The config-manager's systemd unit for ``node``; ``default_config`` when unlabelled."""
    return (
        "[Unit]\n"
        "Description=NVIDIA device plugin config-manager (real)\n"
        f"After={Path(device_plugin.UNIT).name}\n"
        "\n"
        "[Service]\n"
        f"ExecStart={BINARY} --kubeconfig={kubelet.KUBECONFIG} --node-name={node}"
        f" --node-label={DEVICE_PLUGIN_CONFIG_LABEL} --config-file-srcdir={CONFIG_DIR}"
        f" --config-file-dst={DEVICE_PLUGIN_CONFIG_PATH} --default-config={default_config}"
        f" --send-signal=true --signal=1 --process-to-signal={device_plugin.PLUGIN}\n"
        # It exits on an error (a label naming no config, no plugin to signal yet); the chart's
        # pod restarts it, as Restart= does here.
        "Restart=always\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def install(
    root: Path, binary: Path, node: str, configs: dict[str, str], default_config: str
) -> None:
    """Put ``binary``, its unit and ``configs`` (ConfigMap key -> text) into the host ``root``.

    The plugin's config file is left to config-manager: it makes it a symlink into
    ``CONFIG_DIR`` before signalling the plugin.
    """
    kubelet.put(root, BINARY, binary.read_bytes(), mode=0o755)
    for name, text in configs.items():
        kubelet.put(root, f"{CONFIG_DIR}/{name}", text.encode())
    kubelet.put(root, UNIT, unit(node, default_config).encode())
    kubelet.enable(root, UNIT)
