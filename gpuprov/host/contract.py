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
ADVISE_SCHEMA = "gpuprov.advise/v1"  # `gpuprov advise --format json`
ADVISE_CHECK_SCHEMA = "gpuprov.advise-check/v1"  # `gpuprov advise --check ... --format json`
MIG_LAYOUT_SCHEMA = "gpuprov.mig-layout/v1"
# The probe document's ``nvml`` field: "ok", why NVML could not start, or no agent to ask.
PROBE_NVML_OK = "ok"
PROBE_AGENT_MISSING = "agent-missing"
PROBE_NVML_STATES = (
    PROBE_NVML_OK,
    "library-not-found",
    "driver-not-loaded",
    "no-permission",
    "error",
    PROBE_AGENT_MISSING,
)
SNAPSHOT_SUFFIX = ".json"  # `gpuprov verify --snapshot-dir DIR` reads DIR/<host>.json

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
APT_PREFERENCES_DIR = "/etc/apt/preferences.d"
# One apt preferences file pins the driver's and the toolkit's packages to the planned versions.
APT_PIN_PATH = f"{APT_PREFERENCES_DIR}/gpuprov-nvidia.pref"
# Above 1000: apt installs the pinned version even when that is a downgrade (apt_preferences(5)).
APT_PIN_PRIORITY = 1001
OS_RELEASE_PATH = "/etc/os-release"  # its ID chooses the driver's package source by default
PERSISTENCED_UNIT = "nvidia-persistenced.service"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
# Every device node the NVIDIA driver makes starts so: nvidia0.., nvidiactl, nvidia-uvm,
# nvidia-modeset, nvidia-caps/. A process holding any of them open blocks a GPU reset.
NVIDIA_DEVICE_PREFIX = "/dev/nvidia"

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
# Every drop-in must be a whole typed document, or the kubelet refuses to start
# (https://github.com/kubernetes/kubernetes/issues/124796).
KUBELET_CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"
KUBELET_CONFIG_KIND = "KubeletConfiguration"
KUBELET_UNIT = "kubelet.service"
# Where device plugins register (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1 DevicePluginPath)
# and the device manager's checkpoint in it (kubernetes pkg/kubelet/cm/devicemanager/types.go).
KUBELET_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_DEVICE_CHECKPOINT_NAME = "kubelet_internal_checkpoint"
KUBELET_DEVICE_CHECKPOINT = f"{KUBELET_DEVICE_PLUGIN_DIR}/{KUBELET_DEVICE_CHECKPOINT_NAME}"
# The kubelet's registration socket in that directory (pluginapi.KubeletSocket): there while a
# kubelet runs its device manager.
KUBELET_SOCKET_NAME = "kubelet.sock"
# The most the probe reads of the checkpoint: it lists every device id of every resource (and
# again per allocation); 32 GPUs x 1024 replicas of ~50-byte ids is ~1.6 MB, so 8 MiB leaves room
# for the pods' entries and stays bounded.
KUBELET_CHECKPOINT_MAX_BYTES = 8 << 20
# The kubelet's pod-resources API (kubernetes v1.34.4 pkg/kubelet/kubelet.go
# ListenAndServePodResources: <root-dir>/pod-resources/kubelet.sock, the directory named by
# pkg/kubelet/config/defaults.go DefaultKubeletPodResourcesDirName); gpuprov.host.kubelet.
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# The most rows (container x resource) the probe reports: maxPods is at most a few hundred.
POD_RESOURCES_CONTAINERS_MAX = 4096
# Seconds the probe waits for the kubelet's answer (a local call; it answers in milliseconds).
POD_RESOURCES_TIMEOUT_S = 10.0
# Seconds the probe waits for the kubelet to name every pod the container runtime runs: right
# after a restart its pod-resources List names none until it has taken the API server's pods
# (about 1 s in the lab; gpuprov.host.kubelet.runtime_pods). Beyond it the probe says which.
POD_RESOURCES_SYNC_S = 30.0
# The container runtime's CRI socket, by `container_runtime`: kubeadm's defaults
# (kubernetes v1.34.4 cmd/kubeadm/app/constants/constants_unix.go CRISocketContainerd,
# CRISocketDocker; /var/run is /run on Debian): containerd serves the CRI on its main socket,
# Docker Engine through cri-dockerd.
CRI_SOCKETS = {
    "containerd": "/run/containerd/containerd.sock",
    "docker": "/run/cri-dockerd.sock",
}
# The most socket names the probe lists in the directory (one per resource a plugin serves).
DEVICE_PLUGIN_SOCKETS_MAX = 256

# --- Device plugin --------------------------------------------------------------------------------
DEVICE_PLUGIN_CONFIG_PATH = "/etc/nvidia/device-plugin/config.yaml"
DEVICE_PLUGIN_CONFIG_VERSION = "v1"  # NVIDIA/k8s-device-plugin api/config/v1
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_STRATEGIES = ("none", "single", "mixed")
# NVIDIA's plugin serves each resource ``nvidia.com/<name>`` on its own socket
# ``nvidia-<name>.sock`` in the kubelet's device-plugin directory (internal/plugin/server.go,
# https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/internal/plugin/server.go).
DEVICE_PLUGIN_RESOURCE_DOMAIN = "nvidia.com"
# The plugin's program name (cmd/nvidia-device-plugin), as its process shows it on the host
# whether systemd or a DaemonSet runs it: what the deploy's wait looks for before waiting.
DEVICE_PLUGIN_PROGRAM = "nvidia-device-plugin"
DEVICE_PLUGIN_SOCKET_PREFIX = "nvidia-"
DEVICE_PLUGIN_SOCKET_SUFFIX = ".sock"

# --- GPU clients -------------------------------------------------------------------------------
# Default of `gpu_clients`: the units stopped, in this order, before a GPU reset or a MIG mode
# change, and started again in reverse after. mig-parted's pre-apply-mode hooks stop the
# Kubernetes services (kubelet, dcgm-exporter), then the driver services (nvsm, nvidia-dcgm)
# (deployments/systemd/hooks-default.yaml, hooks.sh); the GPU Operator's list of GPU clients adds
# dcgm and nv_peer_mem; nvidia-persistenced holds every GPU open (NVIDIA/gpu-operator#118); and
# the device plugin, when systemd runs it, holds NVML (shared/reference/consumers.md).
DEVICE_PLUGIN_UNIT = f"{DEVICE_PLUGIN_PROGRAM}.service"  # where systemd runs it (not a DaemonSet)
GPU_CLIENT_UNITS = (
    KUBELET_UNIT,
    DEVICE_PLUGIN_UNIT,
    "dcgm-exporter.service",
    "nvsm.service",
    "nvidia-dcgm.service",
    "dcgm.service",
    "nv_peer_mem.service",
    PERSISTENCED_UNIT,
)

# --- MPS (`sharing_strategy: mps` on `shared` hosts) ----------------------------------------------
# The device plugin's sharing strategies (k8s-device-plugin api/config/v1/sharing.go): the plugin
# writes `sharing.timeSlicing` or `sharing.mps` from the same replicas.
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
SHARING_STRATEGIES = (SHARING_TIME_SLICING, SHARING_MPS)
# Where NVIDIA's MPS control daemon keeps its per-resource pipe and log directories and the shm
# tmpfs it mounts (`flags.mpsRoot`; the helm chart's `mps.root` default, which it mounts into the
# daemon and the plugin at /mps: deployments/helm/nvidia-device-plugin/values.yaml).
MPS_ROOT = "/run/nvidia/mps"
MPS_ROOT_MODE = "0755"  # what the daemon creates its own directories with (mps/daemon.go)
# /run is a tmpfs: a tmpfiles.d entry makes the root again at every boot (tmpfiles.d(5)).
MPS_TMPFILES_PATH = "/etc/tmpfiles.d/gpuprov-mps.conf"

# --- Kubernetes objects (gpuprov kube) ---------------------------------------------------------
# The node label NVIDIA's config-manager sidecar reads to pick a named device plugin config
# (k8s-device-plugin cmd/config-manager) and the one the GPU Operator's MIG manager watches
# (mig-parted cmd/nvidia-mig-manager).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# The node label the device plugin chart's MPS control daemon DaemonSet selects (GPU Feature
# Discovery sets it when a node's config shares with MPS; gpuprov sets it from the plan so the
# daemon runs without GFD): deployments/helm/nvidia-device-plugin/templates/
# daemonset-mps-control-daemon.yml.
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
KUBE_LABEL_DOMAIN = "gpuprov.io"
POOL_LABEL = f"{KUBE_LABEL_DOMAIN}/pool"  # default pool label and taint key, value = the mode
OWNED_TAINTS_ANNOTATION = f"{KUBE_LABEL_DOMAIN}/taints"  # the taints gpuprov set last time
OWNED_LABELS_ANNOTATION = f"{KUBE_LABEL_DOMAIN}/labels"  # the labels gpuprov set last time
KUBE_FIELD_MANAGER = "gpuprov"
# `kube render --fleet` (docs/fleet.md): the namespace of the Plans (system-upgrade-controller's
# own, manifests/system-upgrade-controller.yaml at v0.20.1), and what the Job writes on its node:
# the plan version it applied and the result (FLEET_APPLIED or FLEET_FAILED).
FLEET_NAMESPACE = "system-upgrade"
FLEET_PLAN_ANNOTATION = f"{KUBE_LABEL_DOMAIN}/fleet-plan"
FLEET_RESULT_ANNOTATION = f"{KUBE_LABEL_DOMAIN}/fleet-result"
FLEET_APPLIED, FLEET_FAILED = "applied", "failed"
# The label every pod of a system-upgrade-controller Job carries (pkg/upgrade/job/job.go:167-180
# at v0.20.1); SUC's own drain leaves such pods alone (--pod-selector '!<label>'), and so does
# gpuprov's: a drain from inside a fleet Job must not evict the Job running it.
SUC_CONTROLLER_LABEL = "upgrade.cattle.io/controller"
# `gpuprov verify --canary`: its pods' namespace and labels (docs/kubernetes.md "Canary pods").
CANARY_NAMESPACE = "gpuprov-canary"
CANARY_LABEL = f"{KUBE_LABEL_DOMAIN}/canary"  # value: the run's id, so a run removes its own
CANARY_HOST_ANNOTATION = f"{KUBE_LABEL_DOMAIN}/host"
CANARY_RESOURCE_ANNOTATION = f"{KUBE_LABEL_DOMAIN}/resource"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"  # well-known label (kubernetes.io/docs labels)
# NVIDIA's device plugin names a time-sliced replica ``<id>::<n>`` (k8s-device-plugin
# internal/rm/devices.go NewAnnotatedID: ``fmt.Sprintf("%s::%d", id, replica)``; device_map.go
# makes one per replica).
REPLICA_ID_SEPARATOR = "::"
DEVICE_PLUGIN_CONFIGMAP = "gpuprov-device-plugin-configs"  # keys are config names
DEVICE_PLUGIN_DEFAULT_CONFIG = "whole"  # nodes without the label: whole cards
MIG_PARTED_CONFIGMAP = "gpuprov-mig-parted-config"
MIG_PARTED_CONFIGMAP_KEY = "config.yaml"  # the key the GPU Operator's MIG manager reads
MIG_PARTED_CONFIG_VERSION = "v1"  # mig-parted api/spec/v1
MIG_DISABLED_CONFIG = "all-disabled"  # mig-parted's conventional name

# --- Modes ----------------------------------------------------------------------------------------
MODES = ("shared", "mig", "whole_card", "vgpu")

# --- vGPU (HAMi-core, scheduled by HAMi or by Volcano; docs/vgpu.md) -----------------------------
VGPU_FLAVOURS = ("hami", "volcano")
# What each flavour's device plugin registers with the kubelet, and what its scheduler counts:
# HAMi chart values.yaml `resourceName`/`resourceMem`/`resourceCores`
# (https://github.com/Project-HAMi/HAMi/blob/06e9e80522e7077658a6bcd290df390d18a0217e/charts/hami/values.yaml);
# Volcano's `resourceCountName`/`resourceMemoryName`/`resourceCoreName`
# (https://github.com/Project-HAMi/volcano-vgpu-device-plugin/blob/422418665d03b06dc54a2aa511f511b462258852/doc/config.md).
HAMI_MEMORY_RESOURCE = "nvidia.com/gpumem"  # MiB
HAMI_CORES_RESOURCE = "nvidia.com/gpucores"  # percent of a GPU
VOLCANO_COUNT_RESOURCE = "volcano.sh/vgpu-number"
VOLCANO_MEMORY_RESOURCE = "volcano.sh/vgpu-memory"  # units of the memory factor's MiB
VOLCANO_CORES_RESOURCE = "volcano.sh/vgpu-cores"
# flavour -> its (count, memory, cores) resource names
VGPU_RESOURCES = {
    "hami": (GPU_RESOURCE, HAMI_MEMORY_RESOURCE, HAMI_CORES_RESOURCE),
    "volcano": (VOLCANO_COUNT_RESOURCE, VOLCANO_MEMORY_RESOURCE, VOLCANO_CORES_RESOURCE),
}
VGPU_CORES_PER_GPU = 100  # both count a GPU's cores as 100 percent
VGPU_OPERATING_MODE = "hami-core"  # the node config's `operatingmode` (the other one is `mig`)
# The label HAMi's device plugin DaemonSet selects (chart `devicePlugin.nvidiaNodeSelector`).
HAMI_NODE_LABEL = ("gpu", "on")
VGPU_FLAVOUR_LABEL = f"{KUBE_LABEL_DOMAIN}/vgpu"  # gpuprov's own: value = the flavour
# The per-node config each flavour's device plugin reads (key config.json, `nodeconfig` list):
# HAMi reads the ConfigMap its chart's `devicePlugin.nodeConfiguration.externalConfigName` names;
# Volcano's plugin reads `volcano-vgpu-node-config` by name.
HAMI_NODE_CONFIGMAP = "gpuprov-hami-node-config"
VOLCANO_NODE_CONFIGMAP = "volcano-vgpu-node-config"
VGPU_NODE_CONFIGMAP_KEY = "config.json"
VGPU_NAMESPACE = "kube-system"  # where both charts install by default
# The most a kubelet reads of one device plugin message: it dials each plugin with no
# MaxCallRecvMsgSize (kubernetes v1.34.4 pkg/kubelet/cm/devicemanager/plugin/v1beta1/client.go:127-142),
# so grpc-go's default client limit applies (grpc v1.72.1 clientconn.go:101, 4 MiB).
KUBELET_PLUGIN_MESSAGE_LIMIT = 4 * 1024 * 1024
# Bytes one volcano.sh/vgpu-memory device takes in Volcano's ListAndWatch message (measured with the
# real v1.12.0 plugin: 163118 devices, 10743568 bytes); it sends one device per memory unit.
VOLCANO_MEMORY_DEVICE_BYTES = 66
# The sockets Volcano's v1.12.0 plugin serves its three resources on (its pkg/plugin/vgpu
# server.go:112-116): NVIDIA's naming, but not NVIDIA's plugin, so on a volcano host they are not
# NVIDIA resources ("nvidia.com/vgpu-number") left over.
VOLCANO_PLUGIN_SOCKETS = (
    "nvidia-vgpu-number.sock",
    "nvidia-vgpu-cores.sock",
    "nvidia-vgpu-memory.sock",
)
# The Node annotation each flavour's device plugin writes with what it registered, per GPU:
# HAMi v2.10.0 a JSON list of pkg/device/devices.go DeviceInfo (pkg/device/nvidia/register.go);
# Volcano's v1.12.0 colon-terminated comma records (pkg/plugin/vgpu/register.go, util.go).
# ../shared/reference/vgpu-plugins.md sections 6 and 7 (observed with the real binaries).
VGPU_REGISTER_ANNOTATIONS = {
    "hami": "hami.io/node-nvidia-register",
    "volcano": "volcano.sh/node-vgpu-register",
}
# The GPU Operator's gate for its device plugin on a node: "false" keeps NVIDIA's plugin off a
# vgpu node, which would otherwise advertise the same GPUs a second time.
OPERATOR_DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"

# --- The probe ------------------------------------------------------------------------------------
# The most the probe reads of one file: every file gpuprov checks is a few KiB. A file that is
# larger, or not a regular file (a FIFO, a device, a directory), or unreadable is reported in the
# probe document as {"error": why} in place of its text (``files`` section).
PROBE_FILE_MAX_BYTES = 1 << 20

# --- GPU health (docs/health.md) ------------------------------------------------------------------
# The kernel's log, read by the probe for NVRM Xid lines: non-blocking, at most
# KERNEL_LOG_MAX_BYTES (the kernel's ring buffer is typically 128 KiB - a few MiB; log_buf_len).
KERNEL_LOG_PATH = "/dev/kmsg"
KERNEL_LOG_MAX_BYTES = 16 << 20
KERNEL_LOG_MAX_XIDS_PER_GPU = 32  # distinct non-critical XID codes kept per GPU, with counts
# Critical XID codes a probe keeps whole (``--critical-xids``; ``health_critical_xids`` lists at
# most this many), however many other codes the log holds.
CRITICAL_XIDS_MAX = 64
HEALTH_NOT_SUPPORTED = "not-supported"  # what the probe records for an NVML call a GPU lacks
# The largest count each NVML health reading can carry: nvml.h gives ECC counts as
# `unsigned long long`, remapped rows and retired pages as `unsigned int`. A count at its maximum
# is saturated: the true count is unknown (verify calls the GPU unhealthy).
NVML_ECC_COUNT_MAX = 2**64 - 1
NVML_UINT_MAX = 2**32 - 1
# `gpuprov kube render --node-problem-detector`: a ConfigMap for Node Problem Detector (which
# usually runs in kube-system), its key a system log monitor config NPD reads with
# --config.system-log-monitor=/config/<key>.
NPD_NAMESPACE = "kube-system"
NPD_CONFIGMAP = "gpuprov-node-problem-detector"
NPD_CONFIGMAP_KEY = "gpu-xid-monitor.json"
NPD_CONDITION = "GPUCriticalXid"

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


def device_plugin_socket(resource: str) -> str | None:
    """The socket NVIDIA's device plugin serves ``resource`` on; None outside ``nvidia.com``.

    >>> device_plugin_socket("nvidia.com/gpu.shared"), device_plugin_socket("example.com/fpga")
    ('nvidia-gpu.shared.sock', None)
    """
    domain, _, name = resource.partition("/")
    if domain != DEVICE_PLUGIN_RESOURCE_DOMAIN or not name:
        return None
    return f"{DEVICE_PLUGIN_SOCKET_PREFIX}{name}{DEVICE_PLUGIN_SOCKET_SUFFIX}"


def device_plugin_resource(socket: str) -> str | None:
    """The resource NVIDIA's device plugin serves on ``socket``; None for other sockets.

    >>> device_plugin_resource("nvidia-mig-1g.10gb.sock"), device_plugin_resource("kubelet.sock")
    ('nvidia.com/mig-1g.10gb', None)
    """
    prefix, suffix = DEVICE_PLUGIN_SOCKET_PREFIX, DEVICE_PLUGIN_SOCKET_SUFFIX
    if not socket.startswith(prefix) or not socket.endswith(suffix):
        return None
    name = socket[len(prefix) : -len(suffix)]
    return f"{DEVICE_PLUGIN_RESOURCE_DOMAIN}/{name}" if name else None


def apt_source_path(repo: str) -> str:
    """The deb822 source file of ``repo``.

    >>> apt_source_path(DRIVER_REPO)
    '/etc/apt/sources.list.d/gpuprov-nvidia-driver.sources'
    """
    return posixpath.join(APT_SOURCES_DIR, f"{repo}.sources")


def file_record_path(dest: str) -> str:
    """The record of ``dest`` as gpuprov last wrote it (its ``sha1sum`` line): present while
    the file is gpuprov's, gone once the deploy removed the file.

    >>> file_record_path("/etc/docker/daemon.json")
    '/var/lib/gpuprov/files/etc/docker/daemon.json.sha1'
    """
    return f"{FILE_RECORDS_DIR}{dest}.sha1"
