"""The host contract: every path, schema, exit code and name that gpuprov puts on a host or reads
back, defined once. Planner, deploy, agent, probe and verify import these; nothing redefines them.

Stdlib only and import-free, so the agent bundle (production hosts) and the pure core can both
use it.

>>> MIG_LAYOUT_PATH
'/etc/gpuprov/mig-layout.json'
>>> CRI_PLUGIN[2]
'io.containerd.grpc.v1.cri'
>>> kubelet_drop_in_path("/etc/kubernetes/kubelet.conf.d")
'/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf'
"""

from __future__ import annotations

import posixpath

# --- Schemas of the documents gpuprov writes and reads -------------------------------------------
PLAN_SCHEMA = "gpuprov.plan/v1"
PROBE_SCHEMA = "gpuprov.probe/v1"
VERIFY_SCHEMA = "gpuprov.verify/v1"
MIG_LAYOUT_SCHEMA = "gpuprov.mig-layout/v1"
SIM_SCHEMA = "gpuprov.sim/v1"  # the simulated driver's state file (lab and tests)

# --- Exit codes ------------------------------------------------------------------------------------
# CLI: 0 everything matches, 1 drift / unreachable / does not fit, 2 a user's mistake.
EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_BAD_INPUT = 2
# The agent's `apply`: 0 done, 1 failed, 2 bad layout file, 3 a reboot is required and allowed.
AGENT_EXIT_OK = 0
AGENT_EXIT_FAILED = 1
AGENT_EXIT_BAD_INPUT = 2
AGENT_EXIT_REBOOT = 3
AGENT_REBOOT_MARK = "gpuprov-mig: reboot required"  # printed by the deploy's wrapper on exit 3

# --- The agent on the host -------------------------------------------------------------------------
AGENT_PATH = "/usr/lib/gpuprov/agent.pyz"  # default of `gpuprov_agent_path`
AGENT_CACHE_DIR = "/var/cache/gpuprov"  # bytecode-cached copies of the bundle
AGENT_CACHE_ENV = "GPUPROV_AGENT_CACHE"
MIG_APPLY_LOCK = "/run/lock/gpuprov-mig.lock"

# --- MIG on the host -------------------------------------------------------------------------------
MIG_LAYOUT_PATH = "/etc/gpuprov/mig-layout.json"
MIG_UNIT = "gpuprov-mig.service"
MIG_UNIT_PATH = f"/etc/systemd/system/{MIG_UNIT}"
MIG_OFF_PATH = "/run/gpuprov/mig-off.json"  # one-off MIG-off layout for hosts outside `mig`

# --- Files gpuprov keeps track of ------------------------------------------------------------------
FILE_RECORDS_DIR = "/var/lib/gpuprov/files"  # sha1 of each file as gpuprov last wrote it
BACKUP_INFIX = ".gpuprov-backup-"  # <path>.gpuprov-backup-<YYYYmmddTHHMMSS>
TEMP_SUFFIX = ".gpuprov-tmp"  # .<name>.gpuprov-tmp beside the target while it is checked
FILE_MODE = "644"

# --- Driver ---------------------------------------------------------------------------------------
NOUVEAU_BLACKLIST_PATH = "/etc/modprobe.d/gpuprov-blacklist-nouveau.conf"
APT_KEYRINGS_DIR = "/etc/apt/keyrings"
APT_SOURCES_DIR = "/etc/apt/sources.list.d"
DRIVER_REPO = "gpuprov-nvidia-driver"  # name of the deb822 source and its keyring
TOOLKIT_REPO = "gpuprov-nvidia-container-toolkit"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"

# --- Container runtime ----------------------------------------------------------------------------
CONTAINER_RUNTIMES = ("containerd", "docker")
# What `nvidia-ctk runtime configure` writes: runc's shim with NVIDIA's runtime as its binary
# (https://github.com/NVIDIA/nvidia-container-toolkit, cmd/nvidia-ctk/runtime/configure).
NVIDIA_RUNTIME = "nvidia"
NVIDIA_RUNTIME_TYPE = "io.containerd.runc.v2"
NVIDIA_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
DOCKER_NVIDIA_RUNTIME_PATH = "nvidia-container-runtime"  # daemon.json `runtimes.nvidia.path`
DOCKER_DAEMON_PATH = "/etc/docker/daemon.json"
CONTAINERD_CONFIG_PATH = "/etc/containerd/config.toml"  # default of `containerd_config_path`
CONTAINERD_DROP_IN = "99-nvidia.toml"  # the name nvidia-ctk >= 1.19 uses
CONTAINERD_UNIT = "containerd.service"
DOCKER_UNIT = "docker.service"
# The files a containerd swap replaced, kept until containerd runs the new ones with CRI loaded.
CONTAINERD_ROLLBACK_DIR = "/run/gpuprov/containerd-previous"
# containerd config version -> the CRI plugin table that holds `containerd.runtimes`
# (https://github.com/containerd/containerd/blob/main/docs/cri/config.md).
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}

# --- Kubelet --------------------------------------------------------------------------------------
# The kubelet's own default maxPods (https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/).
KUBELET_DEFAULT_MAX_PODS = 110
KUBELET_CONFIG_PATH = "/var/lib/kubelet/config.yaml"
KUBELET_DROP_IN = "50-gpuprov.conf"  # drop-ins must end in .conf, applied in sorted order

# --- Device plugin --------------------------------------------------------------------------------
DEVICE_PLUGIN_CONFIG_PATH = "/etc/nvidia/device-plugin/config.yaml"
DEVICE_PLUGIN_CONFIG_VERSION = "v1"  # NVIDIA/k8s-device-plugin api/config/v1
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_STRATEGIES = ("none", "single", "mixed")

# --- Modes ----------------------------------------------------------------------------------------
MODES = ("shared", "mig", "whole_card")

# --- The simulated driver (lab and tests only) ----------------------------------------------------
SIM_ENV = "GPUPROV_NVML_SIM"  # names the state file; unset on production hosts
SIM_STATE_PATH = "/var/lib/nvidia-sim/gpus.json"  # where the lab keeps it

# --- NVML -----------------------------------------------------------------------------------------
# What NVML answers for a profile this GPU or GI does not have (mig-parted skips both):
# NVML_ERROR_INVALID_ARGUMENT (2) and NVML_ERROR_NOT_SUPPORTED (3), nvml.h.
NVML_PROFILE_ABSENT = (2, 3)


def containerd_drop_in_dir(containerd_config_path: str) -> str:
    """The drop-in directory: ``conf.d/`` beside the main containerd config.

    >>> containerd_drop_in_dir("/opt/k8s/containerd/config.toml")
    '/opt/k8s/containerd/conf.d'
    """
    return posixpath.join(posixpath.dirname(containerd_config_path), "conf.d")


def containerd_drop_in_path(containerd_config_path: str) -> str:
    """gpuprov's drop-in for ``containerd_config_path``.

    >>> containerd_drop_in_path("/etc/containerd/config.toml")
    '/etc/containerd/conf.d/99-nvidia.toml'
    """
    return posixpath.join(containerd_drop_in_dir(containerd_config_path), CONTAINERD_DROP_IN)


def containerd_drop_in_glob(containerd_config_path: str) -> str:
    """The pattern the main containerd config must import.

    >>> containerd_drop_in_glob("/etc/containerd/config.toml")
    '/etc/containerd/conf.d/*.toml'
    """
    return posixpath.join(containerd_drop_in_dir(containerd_config_path), "*.toml")


def kubelet_drop_in_path(kubelet_config_dir: str) -> str:
    """gpuprov's kubelet drop-in in ``kubelet_config_dir``.

    >>> kubelet_drop_in_path("/etc/kubernetes/kubelet.conf.d")
    '/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf'
    """
    return posixpath.join(kubelet_config_dir, KUBELET_DROP_IN)


def kubelet_drop_in_glob(kubelet_config_dir: str | None) -> str | None:
    """The drop-ins the kubelet reads (only ``.conf`` files), or None without a directory.

    >>> kubelet_drop_in_glob("/etc/kubernetes/kubelet.conf.d")
    '/etc/kubernetes/kubelet.conf.d/*.conf'
    """
    return posixpath.join(kubelet_config_dir, "*.conf") if kubelet_config_dir else None


def apt_source_path(repo: str) -> str:
    """The deb822 source file of ``repo``.

    >>> apt_source_path(DRIVER_REPO)
    '/etc/apt/sources.list.d/gpuprov-nvidia-driver.sources'
    """
    return posixpath.join(APT_SOURCES_DIR, f"{repo}.sources")
