"""HAMi's and Volcano's real vGPU device plugins in a lab host, over the simulated NVML.

Every lab host gets both binaries as read-only binds (``BINDS``, from shared/bin, sha256-checked
like NVIDIA's: ``plugin_service.binary``) and a unit for each, not enabled (``configure``). A
host the inventory puts in ``vgpu`` runs the one of its flavour (``start``), as the flavour's
DaemonSet would run on its node, reading what ``gpuprov kube render|apply`` produced for it the
way the charts mount it (../shared/reference/vgpu-plugins.md sections 6 and 7):

- HAMi v2.10.0: ``--config-file`` names the scheduler's device config (the chart's
  ``<scheduler>-device`` ConfigMap, key ``device-config.yaml``, mounted at
  ``/device-config.yaml``), and ``/config/config.json`` is the node config gpuprov renders
  (``gpuprov-hami-node-config``, the chart's ``devicePlugin.nodeConfiguration
  .externalConfigName``, mounted at ``/config``).
- Volcano v1.12.0: the device config is read through the API (ConfigMap
  ``volcano-vgpu-device-config``, key ``device-config.yaml``, in kube-system), built by the chart
  from its ``deviceConfig`` values: gpuprov's ``volcano-values.yaml`` over the chart's defaults.
  ``/config`` is what the chart mounts there: with gpuprov's ``nodeConfig.enabled: false`` that
  is ``volcano-vgpu-device-config`` (templates/daemonset.yaml ``volumes``), so no
  ``config.json``.

NVIDIA's plugin is stopped on such a host: it would advertise the same GPUs a second time (in a
cluster gpuprov's labels keep its DaemonSet off the node). Both plugins talk to the API server
as ``IDENTITY``, given the chart's rights (``RBAC``).

>>> "NODE_NAME=lab-a100-01" in unit("hami", "lab-a100-01")
True
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from gpuprov.host.contract import (
    HAMI_NODE_CONFIGMAP,
    KUBELET_UNIT,
    VGPU_NAMESPACE,
    VGPU_NODE_CONFIGMAP_KEY,
)
from gpuprov_lab import kubelet_unit, plugin_service
from gpuprov_lab.controlplane import Identity
from gpuprov_lab.sim.contract import SIM_ENV, SIM_STATE_PATH

BUILDS = {"hami": "hami-device-plugin", "volcano": "volcano-vgpu-device-plugin"}
BINARY = {flavour: f"/usr/bin/{build}" for flavour, build in BUILDS.items()}
UNIT = {flavour: f"/etc/systemd/system/{build}.service" for flavour, build in BUILDS.items()}
ETC = "/etc/gpuprov-lab/vgpu"
KUBECONFIG = f"{ETC}/kubeconfig"
MOUNTS = {flavour: f"{ETC}/{flavour}/config" for flavour in BUILDS}  # bound at /config
HAMI_DEVICE_CONFIG = f"{ETC}/hami/device-config.yaml"  # bound at /device-config.yaml
VOLCANO_DEVICE_CONFIGMAP = "volcano-vgpu-device-config"
DEVICE_CONFIG_KEY = "device-config.yaml"
IDENTITY = Identity("gpuprov-lab:vgpu-device-plugin")
# The charts' rights for their plugins' service accounts (HAMi monitorrole.yaml, Volcano
# volcano-vgpu-device-plugin.yml:137-153): nodes and their status, pods, configmaps.
RBAC = f"""\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: gpuprov-lab-vgpu-device-plugin}}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch, update, patch]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods, configmaps, events]
  verbs: [get, list, watch, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: gpuprov-lab-vgpu-device-plugin}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpuprov-lab-vgpu-device-plugin}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{IDENTITY.user}"}}
"""

# The device configs' `nvidia` section as each chart renders it by default: HAMi
# templates/scheduler/device-configmap.yaml with values.yaml's resource names and
# devicePlugin.deviceSplitCount/deviceMemoryScaling/deviceCoreScaling (10, 1, 1)
# (https://github.com/Project-HAMi/HAMi/blob/06e9e80522e7077658a6bcd290df390d18a0217e/charts/hami/values.yaml);
# Volcano values.yaml `deviceConfig.nvidia`
# (https://github.com/Project-HAMi/volcano-vgpu-device-plugin/blob/6fb9a0b9f3ae598ae32a15726aeaa670e14f08f8/deployments/helm/volcano-vgpu-device-plugin/values.yaml).
CHART_DEVICE_CONFIG = {
    "hami": {
        "resourceCountName": "nvidia.com/gpu",
        "resourceMemoryName": "nvidia.com/gpumem",
        "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
        "resourceCoreName": "nvidia.com/gpucores",
        "resourcePriorityName": "nvidia.com/priority",
        "defaultMemory": 0,
        "defaultCores": 0,
        "defaultGPUNum": 1,
        "memoryFactor": 1,
        "deviceSplitCount": 10,
        "deviceMemoryScaling": 1,
        "deviceCoreScaling": 1,
    },
    "volcano": {
        "resourceCountName": "volcano.sh/vgpu-number",
        "resourceMemoryName": "volcano.sh/vgpu-memory",
        "resourceMemoryPercentageName": "volcano.sh/vgpu-memory-percentage",
        "resourceCoreName": "volcano.sh/vgpu-cores",
        "overwriteEnv": False,
        "defaultMemory": 0,
        "defaultCores": 0,
        "defaultGPUNum": 1,
        "deviceSplitCount": 10,
        "deviceMemoryScaling": 1,
        "deviceCoreScaling": 1,
        "gpuMemoryFactor": 1,
    },
}


def binds() -> dict[str, str]:
    """Host path -> controller path of both plugins (decompressed and checked once)."""
    return {BINARY[f]: str(plugin_service.binary(build)) for f, build in BUILDS.items()}


def unit(flavour: str, node: str) -> str:
    """The flavour's plugin unit on lab host ``node``: NVML from the driver package the deploy
    installs, the simulator's state file, the config mounted where the chart mounts it."""
    mounts = f"BindReadOnlyPaths={MOUNTS[flavour]}:/config\n"
    command = BINARY[flavour]
    if flavour == "hami":
        mounts += f"BindReadOnlyPaths={HAMI_DEVICE_CONFIG}:/device-config.yaml\n"
        command += " --config-file=/device-config.yaml"
    return (
        "[Unit]\n"
        f"Description={BUILDS[flavour]} (real, over the simulated NVML)\n"
        f"After={KUBELET_UNIT}\n"
        "\n"
        "[Service]\n"
        f"Environment={SIM_ENV}={SIM_STATE_PATH}\n"
        f"Environment=NODE_NAME={node}\n"
        f"Environment=KUBECONFIG={KUBECONFIG}\n"
        f"Environment=DEVICE_CONFIG_NAMESPACE={VGPU_NAMESPACE}\n"
        f"{mounts}"
        f"ExecStart={command}\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def configure(root: Path, node: str, kubeconfig: Path) -> None:
    """Both units (not enabled), their config directories and ``kubeconfig`` (``IDENTITY``'s,
    on the controller) into the host ``root`` before it boots."""
    document = kubelet_unit.self_contained(kubeconfig)
    kubelet_unit.put(root, KUBECONFIG, json.dumps(document).encode(), mode=0o600)
    for flavour in BUILDS:
        (root / MOUNTS[flavour].lstrip("/")).mkdir(parents=True, exist_ok=True)
        kubelet_unit.put(root, UNIT[flavour], unit(flavour, node).encode())
    kubelet_unit.put(root, HAMI_DEVICE_CONFIG, b"")


def device_config(flavour: str, values: dict[str, Any] | None) -> str:
    """``device-config.yaml`` as the chart renders it from ``values`` (gpuprov's
    ``<flavour>-values.yaml``; HAMi's has no device config keys, Volcano's sets
    ``deviceConfig.nvidia``).

    >>> yaml.safe_load(device_config("volcano", {"deviceConfig": {"nvidia": {"gpuMemoryFactor": 16}}}))["nvidia"]["gpuMemoryFactor"]
    16
    """
    nvidia = dict(CHART_DEVICE_CONFIG[flavour])
    if flavour == "volcano":
        nvidia.update(((values or {}).get("deviceConfig") or {}).get("nvidia") or {})
    return yaml.safe_dump({"nvidia": nvidia}, sort_keys=False)


def start(lab: Any, host: str, flavour: str, rendered: Path) -> None:
    """Run ``flavour``'s plugin on ``host`` with what ``gpuprov kube render --out rendered``
    wrote and ``gpuprov kube apply`` put in the API server; NVIDIA's plugin stopped. Called
    again after a change, it brings the change to the plugin (a ConfigMap volume's update and a
    pod restart in a cluster)."""
    values_file = rendered / f"{flavour}-values.yaml"
    values = yaml.safe_load(values_file.read_text()) if values_file.exists() else None
    root = lab.run_dir.host(host).root
    applied = lab.kubectl("apply", "-f", "-", input_text=RBAC)
    assert applied.returncode == 0, applied.stderr
    config_dir = root / MOUNTS[flavour].lstrip("/")
    for old in config_dir.iterdir():
        old.unlink()
    if flavour == "hami":
        (root / HAMI_DEVICE_CONFIG.lstrip("/")).write_text(device_config("hami", values))
        node_config = _configmap_data(lab, HAMI_NODE_CONFIGMAP)[VGPU_NODE_CONFIGMAP_KEY]
        (config_dir / VGPU_NODE_CONFIGMAP_KEY).write_text(node_config)
    else:
        text = device_config("volcano", values)
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": VOLCANO_DEVICE_CONFIGMAP, "namespace": VGPU_NAMESPACE},
            "data": {DEVICE_CONFIG_KEY: text},
        }
        applied = lab.kubectl("apply", "-f", "-", input_text=json.dumps(configmap))
        assert applied.returncode == 0, applied.stderr
        (config_dir / DEVICE_CONFIG_KEY).write_text(text)  # the chart's /config volume
    other = UNIT["volcano" if flavour == "hami" else "hami"]
    lab.run(
        host,
        f"systemctl disable --now {Path(plugin_service.UNIT).name} {Path(other).name}; "
        f"systemctl enable {Path(UNIT[flavour]).name} && "
        f"systemctl restart {Path(UNIT[flavour]).name}",
    )


def stop(lab: Any, host: str) -> None:
    """Both vGPU plugins off on ``host``, NVIDIA's back on."""
    names = " ".join(Path(u).name for u in UNIT.values())
    lab.run(
        host,
        f"systemctl disable --now {names}; systemctl enable --now {Path(plugin_service.UNIT).name}",
    )


def _configmap_data(lab: Any, name: str) -> dict[str, str]:
    got = lab.kubectl("get", "configmap", name, "-n", VGPU_NAMESPACE, "-o", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)["data"]


def wait_annotation(lab: Any, node: str, key: str, timeout: float = 90) -> str:
    """The Node's annotation ``key`` once the plugin has written it."""
    deadline = time.monotonic() + timeout
    while True:
        got = lab.kubectl("get", "node", node, "-o", "json")
        if got.returncode == 0:
            text = (json.loads(got.stdout)["metadata"].get("annotations") or {}).get(key)
            if text:
                return text
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node}: no annotation {key} after {timeout:.0f} s")
        time.sleep(2)
