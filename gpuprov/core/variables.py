"""Every inventory key gpuprov reads, with its default, its bounds and its check.

docs/variables.md mirrors this. Values are validated once, here, and the plan carries the
checked values; deploys and verify read the plan, never raw host data. Each check bounds its
value (sizes, lengths, character sets) so nothing the planner does later can hang on it, and
refuses control characters, so no value can inject a line into a file or a message.

>>> VARIABLES["time_slicing_replicas"].check(4)
4
>>> suggest("time_slicng_replicas"), suggest("MIG_LAYOUT_BY_GPU"), suggest("kube_version")
('time_slicing_replicas', 'mig_layout_by_gpu', None)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuprov.core import kube_names, queues
from gpuprov.core.errors import has_control, shown
from gpuprov.core.memory_budget import BUDGET_MIN_MIB, MIB_PER_GIB, budget_mib
from gpuprov.core.packaging.profiles import driver_version, profiles
from gpuprov.host.contract import (
    AGENT_PATH,
    CONTAINER_RUNTIMES,
    CONTAINERD_CONFIG_PATH,
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIG_PATH,
    GPU_CLIENT_UNITS,
    KUBELET_CONFIG_PATH,
    MIG_CONFIG_LABEL,
    MODES,
    MPS_CAPABLE_LABEL,
    MPS_ROOT,
    OPERATOR_DEVICE_PLUGIN_LABEL,
    POOL_LABEL,
    SHARING_STRATEGIES,
    SHARING_TIME_SLICING,
    VGPU_FLAVOUR_LABEL,
    VGPU_FLAVOURS,
    VGPU_RESOURCES,
)
from gpuprov.host.health import xid

NOT_SET = object()

# --- Bounds, each with the reason it is where it is (docs/variables.md repeats them) ------------
# The NVIDIA kernel driver handles at most 32 GPUs in one system: NV_MAX_DEVICES in
# open-gpu-kernel-modules src/common/sdk/nvidia/inc/nvlimits.h.
GPU_COUNT_MAX = 32
# KubeletConfiguration.maxPods is an int32
# (https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/).
KUBELET_MAX_PODS_MAX = 2**31 - 1
# Keys Kubespray reads too: a value gpuprov accepts for one must be one Kubespray accepts, so
# gpuprov's extensions live under its own keys. Where Kubespray renders each
# (kubernetes-sigs/kubespray):
# - kubelet_max_pods: `maxPods: {{ kubelet_max_pods }}`, roles/kubernetes/node/templates/
#   kubelet-config.v1beta1.yaml.j2 l.27 (at 044dcbae), into the kubelet's KubeletConfiguration.
# - drain_timeout: `--timeout {{ drain_timeout }}` of `kubectl drain`, roles/upgrade/pre-upgrade/
#   tasks/main.yml l.77 (at 02e18bcd); its default is `360s` (defaults/main.yml l.3, at 1ac82593).
KUBESPRAY_KEYS = ("kubelet_max_pods", "drain_timeout")
# The device plugin advertises one device per replica per GPU and the kubelet checkpoints each;
# 1024 x 32 GPUs keeps that list and `maxPods: auto` far inside what a kubelet is run with.
TIME_SLICING_REPLICAS_MAX = 1024
# No GPU has 1 TiB of memory (the largest in the catalog has 141 GB): a larger share is a typo.
SHARE_MEMORY_MAX_GIB = 1024
# `kubectl drain --timeout`; a deploy that waits more than a day on one node is a hang.
DRAIN_TIMEOUT_MAX = 86400
# What a disruptive change evicts: the pods on the GPUs it touches, or every pod of the node.
DRAIN_SCOPES = ("gpus", "node")
# `kube render --fleet`: nodes one Plan changes at once; far above a pool that is still a pool.
FLEET_CONCURRENCY_MAX = 10000
# `gpuprov verify --canary`: a canary that has not started in an hour will not.
CANARY_TIMEOUT_MAX = 3600
# An OCI image reference: [registry/]repository[:tag][@digest], no spaces (distribution/reference).
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@+-]*[a-z0-9]", re.IGNORECASE)
# No GPU has more than seven GPU instances (NVIDIA MIG User Guide, Supported MIG Profiles).
MIG_COUNT_MAX = 7
# mig-parted profile names are short ([Nc.]Ng.Mgb[+attr]); a layout lists each profile once.
PROFILE_NAME_MAX = 32
LAYOUT_PROFILES_MAX = 32
# PATH_MAX on Linux; no path, URL or command gpuprov writes needs more.
TEXT_MAX = 4096
LIST_MAX = 64
# systemd unit names are at most 255 characters (systemd.unit(5)).
UNIT_NAME_MAX = 255

# Debian policy 5.6.1 (package names) and 5.6.12 (versions).
_DEB_VERSION = re.compile(r"[0-9][A-Za-z0-9.+~:-]*")
_COMMAND_NAME = re.compile(r"[A-Za-z0-9._+/-]+")
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]+")
_WORD = re.compile(r"[A-Za-z0-9._+~/:-]+")


@dataclass(frozen=True)
class Variable:
    name: str
    default: Any
    doc: str
    check: Callable[[Any], Any]
    modes: tuple[str, ...] = ()  # non-empty: only hosts in these mode groups may set it
    # The check of the value in a plan document (gpuprov.core.plan_document), where ``check``
    # would look at this machine (a local file) or accepts what planning resolves (``auto``),
    # or the document's JSON spells the value otherwise (integer keys as strings); None: check.
    planned: Callable[[Any], Any] | None = None

    def check_planned(self, value: Any) -> Any:
        """``value`` as a plan document holds it, checked; ValueError when it is wrong."""
        return (self.planned or self.check)(value)


def _int(minimum: int, maximum: int, why: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, got {shown(value)}")
        if value > maximum:
            raise ValueError(f"must be an integer <= {maximum} ({why}), got {shown(value)}")
        return value

    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {shown(value)}")
    return value


def _str(value: Any) -> str:
    """A non-empty string of at most TEXT_MAX characters, without control characters."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {shown(value)}")
    if len(value) > TEXT_MAX:
        raise ValueError(f"must be at most {TEXT_MAX} characters, got {len(value)}")
    if has_control(value):
        raise ValueError(
            f"must not hold control characters (newline, escape, ...), got {shown(value)}"
        )
    return value


def _matching(pattern: re.Pattern, what: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not pattern.fullmatch(_str(value)):
            raise ValueError(f"must be {what}, got {shown(value)}")
        return value

    return check


def _path(value: Any) -> str:
    """An absolute, normalised path on the host (the deploy quotes it wherever it goes)."""
    parts = _str(value).split("/")
    if not value.startswith("/") or ".." in parts or "." in parts or "" in parts[1:]:
        raise ValueError(
            f"must be an absolute path without ., .. or empty components, got {shown(value)}"
        )
    return value


def _local_file(value: Any) -> str:
    """A file on this machine (the controller) that the deploy reads."""
    try:
        found = Path(_str(value)).expanduser().is_file()
    except (OSError, RuntimeError) as e:  # a name too long, `~user` of no such user
        reason = getattr(e, "strerror", None) or str(e)
        raise ValueError(
            f"cannot be looked up on this machine ({reason}): {shown(value)}"
        ) from None
    if not found:
        raise ValueError(f"file not found on this machine: {shown(value)}")
    return value


def _url(value: Any) -> str:
    """An APT repository URI (deb822 `URIs`): one URL, no spaces, a scheme apt knows how to name."""
    parts = urlsplit(_str(value))
    if any(c.isspace() for c in value) or not re.fullmatch(r"[a-z][a-z0-9+.-]*", parts.scheme):
        raise ValueError(f"must be one URL (scheme://host/path, no spaces), got {shown(value)}")
    if parts.scheme in ("http", "https", "ftp") and not parts.hostname:
        raise ValueError(f"must name a host ({parts.scheme}://HOST/...), got {shown(value)}")
    return value


def _node_name(value: Any) -> str:
    """A Kubernetes node name: an RFC 1123 subdomain of at most 253 characters."""
    problem = kube_names.subdomain_problem(_str(value))
    if problem:
        raise ValueError(
            f"must be a Kubernetes node name, and a node name {problem}; got {shown(value)}"
        )
    return value


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {shown(value)}")
        return value

    return check


def _list(item: Callable[[Any], str]) -> Callable[[Any], list[str]]:
    def check(value: Any) -> list[str]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"must be a list of strings, got {shown(value)}")
        if len(value) > LIST_MAX:
            raise ValueError(f"must list at most {LIST_MAX} items, got {len(value)}")
        return [item(v) for v in value]

    return check


def _non_empty(check: Callable[[Any], list[str]]) -> Callable[[Any], list[str]]:
    def non_empty(value: Any) -> list[str]:
        if not check(value):
            raise ValueError("must list at least one item")
        return list(value)

    return non_empty


def _gib(value: Any) -> int | float:
    """An amount of memory in GiB: at least 1 MiB (1/1024) and at most SHARE_MEMORY_MAX_GIB."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if not ok or not 0 < value <= SHARE_MEMORY_MAX_GIB:
        raise ValueError(
            f"must be a number of GiB above 0 and at most {SHARE_MEMORY_MAX_GIB} (no GPU has "
            f"more memory), got {shown(value)}"
        )
    if budget_mib(value) < BUDGET_MIN_MIB:
        raise ValueError(
            f"must be at least {BUDGET_MIN_MIB} MiB ({BUDGET_MIN_MIB}/{MIB_PER_GIB} GiB): "
            f"share memory is counted in whole MiB, so less is a share of 0; got {shown(value)}"
        )
    return value


def _max_pods(value: Any) -> int | str:
    """gpuprov's own maxPods: a number, or ``auto``.

    >>> _max_pods("auto"), _max_pods(250)
    ('auto', 250)
    """
    if isinstance(value, str) and value == "auto":
        return value
    return _int(1, KUBELET_MAX_PODS_MAX, "the kubelet's maxPods is an int32")(value)


def _kubespray_max_pods(value: Any) -> int:
    """Kubespray's ``kubelet_max_pods``: only a number, as Kubespray writes it as it is into the
    kubelet's ``maxPods`` (an int32); gpuprov's ``auto`` has its own key.

    >>> _kubespray_max_pods(110)
    110
    """
    if isinstance(value, str) and value == "auto":
        raise ValueError(
            "`auto` is gpuprov's, not a value Kubespray accepts (Kubespray writes this key as it "
            'is into the kubelet\'s maxPods, an int32): set gpuprov_kubelet_max_pods = "auto" '
            "instead"
        )
    return _int(1, KUBELET_MAX_PODS_MAX, "the kubelet's maxPods is an int32")(value)


_DURATION = re.compile(r"(?:([0-9]{1,6})h)?(?:([0-9]{1,6})m)?(?:([0-9]{1,6})s)?")


def _drain_timeout(value: Any) -> int:
    """Kubespray's ``drain_timeout``, a kubectl duration in whole seconds (``300s``, ``5m``,
    ``1h30m``), as seconds: Kubespray passes it as it is to ``kubectl drain --timeout``, which
    refuses a number without a unit.

    >>> _drain_timeout("5m"), _drain_timeout("1h30m")
    (300, 5400)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(
            f"must be a duration with a unit, as Kubespray passes this key as it is to `kubectl "
            f'drain --timeout`, which refuses {shown(value)}: write "{shown(value)}s"'
        )
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if not match or not any(match.groups()):
        raise ValueError(f'must be a duration such as "300s", "5m" or "1h30m", got {shown(value)}')
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not 1 <= total <= DRAIN_TIMEOUT_MAX:
        raise ValueError(
            f"must be from 1s to {DRAIN_TIMEOUT_MAX}s (a drain that takes more than a day is a "
            f"hung deploy), got {shown(value)}"
        )
    return total


def _layout(value: Any) -> dict[str, int]:
    """A MIG layout, mig-parted's `mig-devices`: profile name -> count. ``{}`` is MIG on with
    no instances; counts are 0..MIG_COUNT_MAX and not all 0 (mig-parted refuses that,
    pkg/types/mig_config.go AssertValidFormat)."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of MIG profile to count, got {shown(value)}")
    if len(value) > LAYOUT_PROFILES_MAX:
        raise ValueError(f"must list at most {LAYOUT_PROFILES_MAX} profiles, got {len(value)}")
    for profile, count in value.items():
        if not isinstance(profile, str) or not 0 < len(profile) <= PROFILE_NAME_MAX:
            raise ValueError(f"profile names must be short strings, got {shown(profile)}")
        if has_control(profile):
            raise ValueError(f"profile names must not hold control characters: {shown(profile)}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count of {profile} must be an integer >= 0, got {shown(count)}")
        if count > MIG_COUNT_MAX:
            raise ValueError(
                f"count of {profile} must be <= {MIG_COUNT_MAX} (no GPU has more GPU "
                f"instances), got {shown(count)}"
            )
    if value and not any(value.values()):
        raise ValueError(
            f"every count is 0 in {shown(value)}; use {{}} for MIG on with no instances "
            "(mig-parted refuses all-zero counts)"
        )
    return dict(value)


def _integer_keys(value: Any) -> Any:
    """A JSON object's keys that spell integers (``"0"``) as integers; anything else as it is."""
    if not isinstance(value, dict):
        return value
    return {int(k) if isinstance(k, str) and k.isdigit() else k: v for k, v in value.items()}


def _layout_by_gpu(value: Any) -> dict[int, dict[str, int] | None]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of GPU index to layout, got {shown(value)}")
    out: dict[int, dict[str, int] | None] = {}
    for index, layout in value.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < GPU_COUNT_MAX:
            raise ValueError(
                f"GPU index must be an integer from 0 to {GPU_COUNT_MAX - 1}, got {shown(index)}"
            )
        try:
            out[index] = None if layout is None else _layout(layout)
        except ValueError as e:
            raise ValueError(f"GPU {index}: {e}") from None
    return out


_VARIABLES = [
    # --- hardware: the plan is checked against these, and the deploy refuses a host that differs
    Variable(
        "gpu_model",
        NOT_SET,
        "GPU model alias (`A100-80GB`, `H100-80GB`, `H200-141GB`, ...) "
        "or NVML product name. Required.",
        _str,
    ),
    Variable(
        "gpu_count",
        NOT_SET,
        f"Number of GPUs in the host, 1 to {GPU_COUNT_MAX} (the NVIDIA driver handles at most "
        f"{GPU_COUNT_MAX} GPUs per system: `NV_MAX_DEVICES`, open-gpu-kernel-modules "
        "`nvlimits.h`). Required.",
        _int(1, GPU_COUNT_MAX, "the NVIDIA driver handles at most 32 GPUs per system"),
    ),
    # --- driver
    Variable(
        "driver_version",
        None,
        "Pinned NVIDIA driver, upstream version (`535.261.03`): the deploy installs and holds "
        "the Debian version of it that the host's apt sources have; None leaves the driver "
        "unmanaged.",
        _optional(driver_version),
    ),
    Variable(
        "driver_source",
        None,
        "Package source that names and versions the driver's packages: "
        + ", ".join(f"`{name}`" for name in profiles())
        + " (gpuprov/core/packaging/sources.yaml); None takes the host's distribution default "
        "from its /etc/os-release.",
        _optional(_choice(*profiles())),
    ),
    Variable(
        "driver_repo_url",
        None,
        "APT repository of the driver packages (deb822 `URIs`: one URL, no spaces); "
        "None uses the host's configured repositories.",
        _optional(_url),
    ),
    Variable(
        "driver_repo_suite",
        "/",
        "deb822 `Suites` of the driver repository (one word).",
        _matching(_WORD, "one word (a suite name or /)"),
    ),
    Variable(
        "driver_repo_components",
        [],
        "deb822 `Components` of the driver repository.",
        _list(_matching(_WORD, "one word")),
    ),
    Variable(
        "driver_repo_key",
        None,
        "Local path of the repository's signing key (armored or "
        "binary); installed as the source's `signed-by` keyring. Must exist on this machine.",
        _optional(_local_file),
        planned=_optional(_str),
    ),
    Variable("driver_reboot", False, "Allow a reboot when a driver change needs one.", _bool),
    Variable(
        "driver_fabric_manager",
        False,
        "The host has NVSwitches: install and enable nvidia-fabricmanager of the same version.",
        _bool,
    ),
    Variable("driver_persistenced", True, "Enable the nvidia-persistenced daemon.", _bool),
    # --- container runtime
    Variable(
        "container_runtime",
        "containerd",
        "`containerd` or `docker`.",
        _choice(*CONTAINER_RUNTIMES),
    ),
    Variable("container_runtime_default", True, "Make `nvidia` the default runtime.", _bool),
    Variable(
        "container_toolkit_version",
        None,
        "Pinned NVIDIA container toolkit, upstream (`1.17.8`) or Debian version (`1.17.8-1`), "
        "of its four packages; None leaves the toolkit unmanaged.",
        _optional(_matching(_DEB_VERSION, "a version like 1.17.8 or 1.17.8-1")),
    ),
    Variable(
        "container_toolkit_repo_url",
        None,
        "APT repository of the container toolkit; None uses `driver_repo_url`'s source.",
        _optional(_url),
    ),
    Variable(
        "container_toolkit_repo_suite",
        "/",
        "deb822 `Suites` of the toolkit repository.",
        _matching(_WORD, "one word (a suite name or /)"),
    ),
    Variable(
        "container_toolkit_repo_components",
        [],
        "deb822 `Components` of the toolkit repository.",
        _list(_matching(_WORD, "one word")),
    ),
    Variable(
        "container_toolkit_repo_key",
        None,
        "Local path of the toolkit repository's signing key. Must exist on this machine.",
        _optional(_local_file),
        planned=_optional(_str),
    ),
    Variable(
        "containerd_config_path",
        CONTAINERD_CONFIG_PATH,
        "containerd's main config (absolute path); gets the `imports` line for the drop-in.",
        _path,
    ),
    # --- time-slicing (hosts in `shared`)
    Variable(
        "time_slicing_replicas",
        NOT_SET,
        f"Replicas (shares) per GPU under either `sharing_strategy`, 2 (the device plugin's "
        f"minimum for time-slicing and MPS) to {TIME_SLICING_REPLICAS_MAX} "
        "(each replica is a device the plugin advertises and the kubelet checkpoints). "
        "Required in `shared`.",
        _int(2, TIME_SLICING_REPLICAS_MAX, "each replica is a device the kubelet tracks"),
        modes=("shared",),
    ),
    Variable(
        "time_slicing_rename",
        True,
        "Advertise `nvidia.com/gpu.shared` instead of `nvidia.com/gpu` (`renameByDefault`).",
        _bool,
        modes=("shared",),
    ),
    Variable(
        "time_slicing_fail_requests_greater_than_one",
        True,
        "Refuse pods that ask for more than one shared GPU (`failRequestsGreaterThanOne`).",
        _bool,
        modes=("shared",),
    ),
    Variable(
        "device_plugin_config_path",
        DEVICE_PLUGIN_CONFIG_PATH,
        "Where the NVIDIA device plugin's config file is written (absolute path).",
        _path,
    ),
    # --- sharing strategy and memory per share (hosts in `shared`; docs/sharing.md)
    Variable(
        "sharing_strategy",
        SHARING_TIME_SLICING,
        "How the device plugin shares each GPU between its `time_slicing_replicas`: "
        "`time-slicing` (`sharing.timeSlicing`: no memory isolation) or `mps` (`sharing.mps`: "
        "NVIDIA's MPS control daemon caps each client at the GPU's memory / replicas; needs the "
        "chart's MPS control daemon and no MIG). The `time_slicing_*` keys set the replicas, "
        "rename and request limit of either.",
        _choice(*SHARING_STRATEGIES),
        modes=("shared",),
    ),
    Variable(
        "mps_root",
        MPS_ROOT,
        "With `sharing_strategy: mps`: the device plugin's `flags.mpsRoot`, where the MPS "
        "control daemon keeps its pipes, logs and shm (absolute path; must match the chart's "
        "`mps.root`). The deploy makes it, mode 0755, at every boot (tmpfiles.d).",
        _path,
        modes=("shared",),
    ),
    Variable(
        "memory_per_share_gib",
        None,
        f"GPU memory one pod may use per share, in GiB (at least 1 MiB = 1/1024, at most "
        f"{SHARE_MEMORY_MAX_GIB}; taken in whole MiB); "
        "the plan refuses replicas (`vgpu`: `vgpu_split_count`) x this above the GPU model's "
        "memory. None: the memory / replicas, shown as not enforced under time-slicing. On "
        "`vgpu` hosts HAMi-core holds each pod to the `gpumem` it requests: request this.",
        _optional(_gib),
        modes=("shared", "vgpu"),
    ),
    Variable(
        "allow_memory_overcommit",
        False,
        "Plan replicas (or the vGPU split) x `memory_per_share_gib` above the GPU's memory "
        "anyway, with a warning on every plan and deploy.",
        _bool,
        modes=("shared", "vgpu"),
    ),
    # -f on the command line: the kernel cuts the process name to 15 characters
    # ("nvidia-device-p"), so `pkill -x nvidia-device-plugin` never matches.
    Variable(
        "device_plugin_reload_command",
        "pkill -HUP -f '^(/[^ ]*/)?nvidia-device-plugin( |$)' || true",
        "Shell command that restarts the device plugin (SIGHUP: it re-reads its config and "
        "lists its devices again); run after its config, the MIG layout or the MIG mode changed.",
        _str,
    ),
    # --- MIG (hosts in `mig`)
    Variable(
        "mig_layout",
        None,
        "MIG layout for every GPU: profile -> count, as mig-parted's `mig-devices`: `{}` is MIG "
        f"on with no instances; counts 0 to {MIG_COUNT_MAX} (no GPU has more GPU instances), "
        "not all 0.",
        _optional(_layout),
        modes=("mig",),
    ),
    Variable(
        "mig_layout_by_gpu",
        {},
        "GPU index -> layout, overriding `mig_layout` for those "
        "GPUs; `None` for a GPU keeps MIG disabled on it (mig-parted's `mig-enabled: false`), "
        "`{}` enables MIG with no instances (`mig-enabled: true`, empty `mig-devices`).",
        _layout_by_gpu,
        modes=("mig",),
        planned=lambda value: _layout_by_gpu(_integer_keys(value)),
    ),
    Variable(
        "mig_strategy",
        "mixed",
        "Device plugin MIG strategy: `mixed`, or `single` (all GPUs must have the same layout).",
        _choice("mixed", "single"),
        modes=("mig",),
    ),
    Variable(
        "gpu_clients",
        list(GPU_CLIENT_UNITS),
        "systemd units that use the GPUs: those running are stopped, in this order, before a "
        "GPU reset or a MIG mode change, and started again in reverse after it (also when it "
        "fails). A process still holding an NVIDIA device node then fails the host, named, with "
        "the GPUs unchanged. Default: mig-parted's and the GPU Operator's lists plus the device "
        "plugin.",
        _list(_matching(_UNIT_NAME, "a systemd unit name")),
    ),
    Variable(
        "mig_reboot",
        False,
        "Allow a reboot when a MIG mode change cannot be applied by a GPU reset.",
        _bool,
    ),
    # --- kubelet
    Variable(
        "kubelet_max_pods",
        None,
        "Kubespray's key (it writes it into the kubelet's `maxPods`), read by gpuprov as the "
        "same number: 1 to 2147483647 (an int32); `auto` is refused here, it is "
        "`gpuprov_kubelet_max_pods`'s. None: `gpuprov_kubelet_max_pods` decides.",
        _optional(_kubespray_max_pods),
    ),
    Variable(
        "gpuprov_kubelet_max_pods",
        None,
        "kubelet `maxPods` gpuprov writes: 1 to 2147483647, or `auto`: 110 plus the pods "
        "sharing adds (time-slicing replicas or vGPU shares, per GPU). Wins over "
        "`kubelet_max_pods`; None: `kubelet_max_pods` when set, else `auto`.",
        _optional(_max_pods),
    ),
    Variable(
        "kubelet_config_dir",
        None,
        "kubelet `--config-dir` (e.g. "
        "`/etc/kubernetes/kubelet.conf.d`): write a drop-in there; None edits "
        "`kubelet_config_path` in place.",
        _optional(_path),
    ),
    Variable("kubelet_config_path", KUBELET_CONFIG_PATH, "kubelet's main config file.", _path),
    # A host provisioned before it joins a cluster, or before the device plugin is installed
    # there (Helm chart, GPU Operator), has nothing registered yet: its owner turns this off
    # until then, rather than read a finding that is expected.
    Variable(
        "verify_kubelet_devices",
        True,
        "`gpuprov verify` checks on the host what the kubelet registered from the device plugin "
        "(its device-manager checkpoint: each planned resource with its count; a plugin socket "
        "serving it), and the deploy, after restarting the plugin or the kubelet, waits until it "
        "is so. `False` for hosts whose kubelet or device plugin does not run yet.",
        _bool,
    ),
    # --- gpuprov's own host agent
    Variable(
        "gpuprov_agent_path",
        AGENT_PATH,
        "Where the deploy installs the host agent (probe + MIG applier) and where verify runs it.",
        _path,
    ),
    Variable(
        "gpuprov_python",
        "python3",
        "Python interpreter on the host that runs the agent (needs only the standard library).",
        _matching(_COMMAND_NAME, "a command name or path without spaces"),
    ),
    # --- Kubernetes node handling
    Variable(
        "kubeconfig",
        None,
        "Local kubeconfig: cordon and drain the node around a disruptive change. Must exist "
        "on this machine.",
        _optional(_local_file),
        planned=_optional(_str),
    ),
    Variable(
        "kube_node_name",
        None,
        "Kubernetes node name (an RFC 1123 subdomain, at most 253 characters); None uses the "
        "inventory host name, which must then be one (`gpu_01` is not: `kube render` refuses it).",
        _optional(_node_name),
    ),
    Variable(
        "drain_timeout",
        "300s",
        "Kubespray's key (its upgrade passes it to `kubectl drain --timeout`): the time allowed "
        f"for `kubectl drain`, a duration in whole seconds (`300s`, `5m`, `1h30m`), 1s to "
        f"{DRAIN_TIMEOUT_MAX}s (a day; longer is a hung deploy); a number without a unit is "
        "refused (kubectl refuses it).",
        _drain_timeout,
        planned=_int(1, DRAIN_TIMEOUT_MAX, "a day"),  # a plan holds the seconds
    ),
    Variable(
        "drain_scope",
        "gpus",
        "What a disruptive change (MIG instances destroyed, a MIG mode change, a driver change) "
        "evicts: `gpus` only the pods holding a device of the GPUs it touches, through the "
        "Eviction API (disruption budgets hold) within `drain_timeout`, other pods keep running; "
        "`node` every pod of the node (`kubectl drain`). A change that reboots the host "
        "(`driver_reboot`, `mig_reboot`) drains the node either way (docs/kubernetes.md).",
        _choice(*DRAIN_SCOPES),
    ),
    # --- gpuprov kube render --fleet (docs/fleet.md)
    Variable(
        "fleet_concurrency",
        1,
        "Nodes of the host's pool that Rancher's system-upgrade-controller reconfigures at "
        f"once (the pool's Plan `concurrency`, `kube render --fleet`), 1 to {FLEET_CONCURRENCY_MAX}; "
        "every host of a pool must say the same.",
        _int(1, FLEET_CONCURRENCY_MAX, "a larger pool is split into groups"),
    ),
    # --- gpuprov verify --canary (docs/kubernetes.md "Canary pods")
    Variable(
        "canary_timeout",
        180,
        f"Seconds `gpuprov verify --canary` gives each canary pod to be scheduled and start "
        f"(image pull included), 1 to {CANARY_TIMEOUT_MAX}.",
        _int(1, CANARY_TIMEOUT_MAX, "a canary that has not started in an hour will not"),
    ),
    Variable(
        "canary_image",
        # NVIDIA's CUDA base image (catalog.ngc.nvidia.com/orgs/nvidia/containers/cuda, tag
        # 12.8.1-base-ubuntu24.04: gitlab.com/nvidia/container-images/cuda dist/12.8.1/ubuntu2404/base).
        "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04",
        "Image of the canary pods (`IfNotPresent`): NVIDIA's CUDA base image by default; an "
        "air-gapped cluster names its mirror's copy.",
        _matching(_IMAGE, "an image reference (registry/repository:tag, no spaces)"),
    ),
    Variable(
        "canary_command",
        ["sleep", "3600"],
        "Command of the canary container; it must keep running while verify reads the "
        "kubelet's pod-resources (the pod is deleted right after; a pod left by a killed verify "
        "ends within the hour).",
        _non_empty(_list(_str)),
    ),
]

# --- vGPU (hosts in `vgpu`): HAMi-core shares, scheduled by HAMi or by Volcano (docs/vgpu.md).
# Defaults are both charts' (HAMi charts/hami/values.yaml `devicePlugin.deviceSplitCount` etc.,
# https://github.com/Project-HAMi/HAMi/blob/06e9e80522e7077658a6bcd290df390d18a0217e/charts/hami/values.yaml;
# volcano-vgpu-device-plugin deployments/helm/volcano-vgpu-device-plugin/values.yaml
# `deviceConfig.nvidia`, https://github.com/Project-HAMi/volcano-vgpu-device-plugin/blob/6fb9a0b9f3ae598ae32a15726aeaa670e14f08f8/deployments/helm/volcano-vgpu-device-plugin/values.yaml).
# Both plugins take a node entry's split count and scalings only when > 0 (otherwise they keep
# their defaults without a word), so 0 is refused here.
VGPU_SPLIT_COUNT_MAX = TIME_SLICING_REPLICAS_MAX  # each share is a device the kubelet tracks
# HAMi registers each GPU's memory (MiB x scaling) and cores (100 x scaling) as int32
# (the node's `hami.io/node-nvidia-register` annotation); 1000 keeps the largest GPU's
# 143771 MiB x 1000 far inside that.
VGPU_SCALING_MAX = 1000
# No GPU has a TiB of memory; a factor past a GPU's own memory is refused by the planner.
VGPU_MEMORY_FACTOR_MAX = 1 << 20


def _ratio(value: Any) -> float | int:
    """A scaling ratio: a number > 0 and <= VGPU_SCALING_MAX (ints stay ints)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"must be a number > 0, got {shown(value)}")
    if value > VGPU_SCALING_MAX:
        raise ValueError(
            f"must be <= {VGPU_SCALING_MAX} (the plugins register MiB x scaling as int32), "
            f"got {shown(value)}"
        )
    return value


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{name}`" for name in names)


_VARIABLES += [
    Variable(
        "vgpu_flavour",
        NOT_SET,
        "Who schedules the vGPU shares: `hami` (HAMi's scheduler; "
        + _names(VGPU_RESOURCES["hami"])
        + ") or `volcano` (Volcano's deviceshare plugin; "
        + _names(VGPU_RESOURCES["volcano"])
        + "). Required in `vgpu`.",
        _choice(*VGPU_FLAVOURS),
        modes=("vgpu",),
    ),
    Variable(
        "vgpu_split_count",
        10,
        f"vGPU shares per GPU (`devicesplitcount`), 1 to {VGPU_SPLIT_COUNT_MAX} (each share is "
        "a device the kubelet tracks); both charts default to 10.",
        _int(1, VGPU_SPLIT_COUNT_MAX, "each share is a device the kubelet tracks"),
        modes=("vgpu",),
    ),
    Variable(
        "vgpu_memory_scaling",
        1,
        "Memory the scheduler may hand out per GPU, as a multiple of its real memory "
        f"(`devicememoryscaling`), > 0 and <= {VGPU_SCALING_MAX}; above 1 is HAMi-core's "
        "experimental oversubscription.",
        _ratio,
        modes=("vgpu",),
    ),
    Variable(
        "vgpu_core_scaling",
        1,
        "Core percentage the scheduler may hand out per GPU, as a multiple of 100 "
        f"(`devicecorescaling`), > 0 and <= {VGPU_SCALING_MAX}.",
        _ratio,
        modes=("vgpu",),
    ),
    Variable(
        "vgpu_memory_factor",
        1,
        f"Volcano only: MiB per `{VGPU_RESOURCES['volcano'][1]}` unit (`gpuMemoryFactor`, the plugin's "
        "`--gpu-memory-factor`), 1 or more and at most the GPU's memory; one value for the "
        "whole cluster.",
        _int(1, VGPU_MEMORY_FACTOR_MAX, "no GPU has a TiB of memory"),
        modes=("vgpu",),
    ),
]

# --- Kubernetes pools: node labels and taints (`gpuprov kube render|apply`). Named `kube_node_*`,
# not Kubespray's `node_labels`/`node_taints`, so an inventory shared with Kubespray keeps its own.
# `{mode}` in a value stands for the host's mode group.
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Set from the plan by `gpuprov kube`, never by hand.
_PLAN_LABELS = (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    MPS_CAPABLE_LABEL,
    VGPU_FLAVOUR_LABEL,
    OPERATOR_DEVICE_PLUGIN_LABEL,
)


def _label_key(key: str) -> str:
    """A Kubernetes label or taint key: ``[prefix/]name``, as the API server validates it."""
    prefix, _, name = key.rpartition("/")
    if prefix and kube_names.subdomain_problem(prefix):
        raise ValueError(f"{shown(key)}: prefix must be a DNS subdomain (like gpuprov.io)")
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(
            f"{shown(key)}: name must be 1-63 characters, alphanumeric at both ends, with - _ . inside"
        )
    return key


def with_mode(value: str, mode: str) -> str:
    """A ``kube_node_labels`` or ``kube_node_taints`` text with ``{mode}`` filled in.

    >>> with_mode("gpuprov.io/pool={mode}:NoSchedule", "mig")
    'gpuprov.io/pool=mig:NoSchedule'
    """
    return value.replace("{mode}", mode)


def _label_value(value: str, mode: str | None = None) -> str:
    """A label (or taint) value: empty, or up to 63 characters ``[A-Za-z0-9-_.]``, with
    ``{mode}`` as ``mode``; without a mode as the shortest mode name, so that only what no host
    could render is refused here (``pool_problems`` checks each host with its own mode)."""
    probe = with_mode(value, mode or min(MODES, key=len))
    if len(probe) > 63 or not _LABEL_NAME.fullmatch(probe):
        text = shown(value) if mode is None else f"{shown(value)} ({shown(probe)} in {mode})"
        raise ValueError(
            f"value {text} must be at most 63 characters, alphanumeric at both ends, "
            "with - _ . inside"
        )
    return value


def _node_labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of label key to value, got {shown(value)}")
    if len(value) > LIST_MAX:
        raise ValueError(f"must hold at most {LIST_MAX} labels, got {len(value)}")
    for key, label in value.items():
        if not isinstance(key, str) or not isinstance(label, str):
            raise ValueError(
                f"label keys and values must be strings, got {shown(key)}: {shown(label)}"
            )
        if key in _PLAN_LABELS:
            raise ValueError(f"{key} is set from the plan; remove it")
        _label_key(key)
        _label_value(label)
    return dict(value)


def _node_taints(value: Any) -> list[str]:
    taints = _list(_str)(value)
    seen: dict[tuple[str, str], str] = {}
    for taint in taints:
        head, sep, effect = taint.rpartition(":")
        if not sep or effect not in TAINT_EFFECTS:
            raise ValueError(
                f"taint {shown(taint)} must be KEY[=VALUE]:EFFECT, EFFECT one of "
                f"{', '.join(TAINT_EFFECTS)}"
            )
        key, _, taint_value = head.partition("=")
        _label_key(key)
        _label_value(taint_value)
        # The API server refuses a node whose taints repeat a key and effect
        # (ValidateNodeTaints: "taints must be unique by key and effect pair").
        if (key, effect) in seen:
            raise ValueError(
                f"taints {shown(seen[key, effect])} and {shown(taint)} have the same key and "
                "effect; Kubernetes allows one taint per key and effect"
            )
        seen[key, effect] = taint
    return taints


def pool_problems(settings: dict[str, Any], mode: str) -> list[tuple[str, str]]:
    """(key, why) for each ``kube_node_labels`` value or ``kube_node_taints`` value that is
    not a label value once ``{mode}`` is this host's ``mode`` (``whole_card`` is 7 characters
    longer than ``mig``).

    >>> pool_problems({"kube_node_labels": {"a": "x" * 60 + "{mode}"}, "kube_node_taints": []},
    ...               "mig")
    []
    """
    problems = []
    for key, value in settings.get("kube_node_labels", {}).items():
        try:
            _label_value(value, mode)
        except ValueError as e:
            problems.append(("kube_node_labels", f"label {shown(key)}: {e}"))
    for taint in settings.get("kube_node_taints", []):
        try:
            _label_value(taint.rpartition(":")[0].partition("=")[2], mode)
        except ValueError as e:
            problems.append(("kube_node_taints", f"taint {shown(taint)}: {e}"))
    return problems


_VARIABLES += [
    Variable(
        "kube_node_labels",
        {POOL_LABEL: "{mode}"},
        "Node labels gpuprov owns on the host's Kubernetes node (`{mode}`: the mode group; "
        "each value at most 63 characters with the host's own mode filled in).",
        _node_labels,
    ),
    Variable(
        "kube_node_taints",
        [f"{POOL_LABEL}={{mode}}:NoSchedule"],
        "Node taints gpuprov owns, `KEY[=VALUE]:EFFECT`, one per key and effect (as Kubernetes "
        "allows): pods need a matching toleration to land on the pool. `[]` for none.",
        _node_taints,
    ),
]


def _teams(value: Any) -> dict[str, Any]:
    queues.teams(value)
    return value


# --- Queues (`gpuprov kube render --queues kueue|volcano`; docs/kubernetes.md#queues). Set once,
# in the inventory's top group (`all` or the group named after the inventory file): the teams
# share the whole cluster's pools. gpuprov.core.queues checks the shape, the planner the pools.
_VARIABLES += [
    Variable(
        "kube_queues",
        {},
        "Teams and their share of each pool: team -> `{quota: {POOL: SHARE}, cohort, "
        "borrowing_limit, lending_limit, guarantee, parent, namespaces, weight, priority}`; "
        "SHARE is a count (integer), a fraction of the pool (0.0 to 1.0), or "
        "`{RESOURCE: count or fraction}`. Top group only; docs/kubernetes.md#queues.",
        _teams,
    ),
    Variable(
        "kube_queues_overcommit",
        {},
        "Pool -> how many times its capacity the teams' quotas may sum to (1 to 100); "
        "without it a pool's quotas must fit its capacity. Top group only.",
        queues.overcommit,
    ),
    Variable(
        "kube_queues_volcano_plugin",
        "capacity",
        "Volcano's queue plugin the rendered scheduler configuration enables: `capacity` "
        "(each queue's `deserved`; nested teams) or `proportion` (weights); never both. "
        "Top group only.",
        _choice(*queues.VOLCANO_PLUGINS),
    ),
]

# --- time limits: every remote step has one, so a stuck mirror, a hung command or a host that
# drops off fails that host, named, and the rest of the fleet goes on (docs/variables.md).
_step_limit = _int(1, 86400, "a step that runs for more than a day is hung")
_VARIABLES += [
    Variable(
        "gpuprov_timeout_step",
        120,
        "Seconds any remote step may run when no limit below is its own "
        "(file writes, small commands, reading the host's state).",
        _step_limit,
    ),
    Variable(
        "gpuprov_timeout_apt_update",
        300,
        "Seconds for `apt-get update` after a repository changed (index downloads).",
        _step_limit,
    ),
    Variable(
        "gpuprov_timeout_packages",
        900,
        "Seconds for installing pinned packages (package downloads and maintainer scripts).",
        _step_limit,
    ),
    Variable(
        "gpuprov_timeout_service",
        300,
        "Seconds for starting, restarting or reloading a daemon.",
        _step_limit,
    ),
    Variable(
        "gpuprov_timeout_mig",
        600,
        "Seconds for the agent to apply a MIG layout (GPU resets included).",
        _step_limit,
    ),
    Variable(
        "gpuprov_timeout_probe",
        60,
        "Seconds for the agent's probe in `gpuprov verify`.",
        _step_limit,
    ),
    Variable(
        "gpuprov_ssh_dead_after",
        30,
        "Seconds without an answer after which a connected host counts as gone (SSH "
        "keepalives every third of it); it is failed within about 4/3 of this.",
        _int(3, 3600, "a host silent for an hour is gone"),
    ),
]

# --- GPU health (docs/health.md) ------------------------------------------------------------------
# XID codes are small numbers (NVIDIA's Xid catalog lists codes up to the low hundreds).
XID_CODE_MAX = 65535


def _xid_codes(value: Any) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"must be a list of XID codes (integers), got {shown(value)}")
    if len(value) > LIST_MAX:
        raise ValueError(f"must list at most {LIST_MAX} codes, got {len(value)}")
    wrong = [v for v in value if not 1 <= v <= XID_CODE_MAX]
    if wrong:
        raise ValueError(f"XID code {wrong[0]} is not in 1..{XID_CODE_MAX}")
    return sorted(set(value))


_VARIABLES += [
    Variable(
        "health_critical_xids",
        list(xid.DEFAULT_CRITICAL),
        "XID codes that make `gpuprov verify` report a GPU unhealthy when the kernel logged "
        "one since boot (NVIDIA's Xid catalog; docs/health.md). `[]` for none.",
        _xid_codes,
    ),
]

VARIABLES: dict[str, Variable] = {v.name: v for v in _VARIABLES}

# gpuprov's own prefix: an unknown key with it is surely a gpuprov key gone wrong. Other
# prefixes (`kube_`, `gpu_`, `driver_`, ...) are shared with Kubespray and Ansible roles.
OWN_PREFIX = "gpuprov_"
# pyinfra's own connection settings (its connectors' data keys): the inventory is pyinfra's, so
# these are neither gpuprov's nor another tool's, and --strict leaves them alone.
PYINFRA_PREFIXES = ("ssh_", "winrm_", "docker_", "dockerssh_", "chroot_", "podman_")
# Longest key worth comparing with the registry: a near miss is at most 2 edits away.
_NEAR_MAX = max(len(n) for n in VARIABLES) + 2
# Key length -> the names a key of that length can be at most 2 edits from, in registry order
# (the first of equally near names wins, as before).
_BY_LENGTH = {
    n: tuple(name for name in VARIABLES if abs(len(name) - n) <= (1 if n <= 8 else 2))
    for n in range(_NEAR_MAX + 1)
}


# Keys gpuprov read under another name before: an inventory that still sets one is told the
# new name, not left with the key silently ignored.
RENAMED = {"mig_gpu_clients": "gpu_clients"}


@lru_cache(maxsize=1 << 16)
def suggest(key: str) -> str | None:
    """The gpuprov key a near-miss ``key`` probably meant (a case or ``-`` variant, or at most
    one edit away for short keys and two for longer ones, or a renamed key's new name), or None:
    then the key is another tool's.

    Cheap on an inventory with thousands of other tools' keys: each distinct key is worked out
    once (cached), and compared only with the names whose length is within the edits allowed
    (each edit changes the length by at most one), each comparison stopping once it is past
    them."""
    if key in RENAMED:
        return RENAMED[key]
    if len(key) > _NEAR_MAX:
        return None
    normal = key.lower().replace("-", "_")
    if normal in VARIABLES:
        return normal if normal != key else None
    allowed = 1 if len(normal) <= 8 else 2
    best, fewest = None, allowed + 1
    for name in _BY_LENGTH.get(len(normal), ()):
        edits = _edits(normal, name, fewest - 1)
        if edits < fewest:
            best, fewest = name, edits
    return best


def _edits(a: str, b: str, most: int) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment), or ``most + 1``
    when it is more than ``most``: only the cells within ``most`` of the diagonal are worked
    out (a path through any other costs more), and it stops at a row that is already past."""
    big = most + 1
    if abs(len(a) - len(b)) > most:
        return big
    previous2: list[int] = []
    previous = [j if j <= most else big for j in range(len(b) + 1)]
    for i, ca in enumerate(a, 1):
        low, high = max(1, i - most), min(len(b), i + most)
        current = [big] * (len(b) + 1)
        current[0] = i if i <= most else big
        for j in range(low, high + 1):
            cb = b[j - 1]
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, previous2[j - 2] + 1)
            current[j] = min(cost, big)
        if min(current[low - 1 : high + 1]) > most:  # every later row is at least as far
            return big
        previous2, previous = previous, current
    return previous[-1]
