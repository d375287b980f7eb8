"""Every inventory key gpuprov reads, with its default and its check (docs/variables.md mirrors this).

Values are validated once, here, and the plan carries the checked values; deploys and verify read
the plan, never raw host data.

>>> VARIABLES["time_slicing_replicas"].check(4)
4
>>> suggest("time_slicng_replicas")
'time_slicing_replicas'
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuprov.contract import (
    AGENT_PATH,
    CONTAINERD_CONFIG_PATH,
    DEVICE_PLUGIN_CONFIG_PATH,
    KUBELET_CONFIG_PATH,
)

NOT_SET = object()


@dataclass(frozen=True)
class Variable:
    name: str
    default: Any
    doc: str
    check: Callable[[Any], Any]
    modes: tuple[str, ...] = ()  # non-empty: only hosts in these mode groups may set it


def _int(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer >= {minimum}, got {value!r}")
        if value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, got {value!r}")
        return value

    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {value!r}")
    return value


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"must be a list of strings, got {value!r}")
    return list(value)


def _max_pods(value: Any) -> int | str:
    if value == "auto":
        return value
    return _int(1)(value)


def _layout(value: Any, allow_empty: bool = False) -> dict[str, int]:
    """A MIG layout: profile name -> count (counts >= 0)."""
    if not isinstance(value, dict) or (not value and not allow_empty):
        raise ValueError(f"must be a mapping of MIG profile to count, got {value!r}")
    for profile, count in value.items():
        if not isinstance(profile, str):
            raise ValueError(f"profile names must be strings, got {profile!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count of {profile} must be an integer >= 0, got {count!r}")
    return dict(value)


def _layout_by_gpu(value: Any) -> dict[int, dict[str, int]]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of GPU index to layout, got {value!r}")
    out = {}
    for index, layout in value.items():
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"GPU index must be an integer >= 0, got {index!r}")
        try:
            out[index] = _layout(layout, allow_empty=True)
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
    Variable("gpu_count", NOT_SET, "Number of GPUs in the host. Required.", _int(1)),
    # --- driver
    Variable(
        "driver_version",
        None,
        "Pinned NVIDIA driver version (`550.127.05`); None leaves the driver unmanaged.",
        _optional(_str),
    ),
    Variable(
        "driver_packages",
        ["nvidia-driver-{branch}-server"],
        "Driver packages to install and hold; `{branch}` is the driver version's first field.",
        _str_list,
    ),
    Variable(
        "driver_package_version",
        "{version}-1",
        "Debian version string of the driver packages; `{version}` is `driver_version`.",
        _str,
    ),
    Variable(
        "driver_repo_url",
        None,
        "APT repository of the driver packages (deb822 `URIs`); "
        "None uses the host's configured repositories.",
        _optional(_str),
    ),
    Variable("driver_repo_suite", "/", "deb822 `Suites` of the driver repository.", _str),
    Variable(
        "driver_repo_components", [], "deb822 `Components` of the driver repository.", _str_list
    ),
    Variable(
        "driver_repo_key",
        None,
        "Local path of the repository's signing key (armored or "
        "binary); installed as the source's `signed-by` keyring.",
        _optional(_str),
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
        _choice("containerd", "docker"),
    ),
    Variable("container_runtime_default", True, "Make `nvidia` the default runtime.", _bool),
    Variable(
        "container_toolkit_version",
        None,
        "Pinned nvidia-container-toolkit Debian version "
        "(`1.17.8-1`); None leaves the toolkit unmanaged.",
        _optional(_str),
    ),
    Variable(
        "container_toolkit_repo_url",
        None,
        "APT repository of the container toolkit; None uses `driver_repo_url`'s source.",
        _optional(_str),
    ),
    Variable(
        "container_toolkit_repo_suite", "/", "deb822 `Suites` of the toolkit repository.", _str
    ),
    Variable(
        "container_toolkit_repo_components",
        [],
        "deb822 `Components` of the toolkit repository.",
        _str_list,
    ),
    Variable(
        "container_toolkit_repo_key",
        None,
        "Local path of the toolkit repository's signing key.",
        _optional(_str),
    ),
    Variable(
        "containerd_config_path",
        CONTAINERD_CONFIG_PATH,
        "containerd's main config; gets the `imports` line for the drop-in.",
        _str,
    ),
    # --- time-slicing (hosts in `shared`)
    Variable(
        "time_slicing_replicas",
        NOT_SET,
        "Replicas per GPU (>= 2, the device plugin's rule). Required in `shared`.",
        _int(2),
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
        "Where the NVIDIA device plugin's config file is written.",
        _str,
    ),
    # -f on the command line: the kernel cuts the process name to 15 characters
    # ("nvidia-device-p"), so `pkill -x nvidia-device-plugin` never matches.
    Variable(
        "device_plugin_reload_command",
        "pkill -HUP -f '^(/[^ ]*/)?nvidia-device-plugin( |$)' || true",
        "Shell command that makes the device plugin re-read its config (SIGHUP).",
        _str,
    ),
    # --- MIG (hosts in `mig`)
    Variable(
        "mig_layout",
        None,
        "MIG layout for every GPU: profile -> count (mig-parted convention).",
        _optional(_layout),
        modes=("mig",),
    ),
    Variable(
        "mig_layout_by_gpu",
        {},
        "GPU index -> layout, overriding `mig_layout` for those "
        "GPUs; `{}` for a GPU keeps MIG disabled on it.",
        _layout_by_gpu,
        modes=("mig",),
    ),
    Variable(
        "mig_strategy",
        "mixed",
        "Device plugin MIG strategy: `mixed`, or `single` (all GPUs must have the same layout).",
        _choice("mixed", "single"),
        modes=("mig",),
    ),
    Variable(
        "mig_gpu_clients",
        ["nvidia-persistenced", "nvidia-dcgm", "dcgm-exporter"],
        "systemd units stopped (and restarted after) when a GPU reset is refused.",
        _str_list,
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
        "auto",
        "kubelet `maxPods`, or `auto`: 110 plus the replicas time-slicing adds.",
        _max_pods,
    ),
    Variable(
        "kubelet_config_dir",
        None,
        "kubelet `--config-dir` (e.g. "
        "`/etc/kubernetes/kubelet.conf.d`): write a drop-in there; None edits "
        "`kubelet_config_path` in place.",
        _optional(_str),
    ),
    Variable("kubelet_config_path", KUBELET_CONFIG_PATH, "kubelet's main config file.", _str),
    # --- gpuprov's own host agent
    Variable(
        "gpuprov_agent_path",
        AGENT_PATH,
        "Where the deploy installs the host agent (probe + MIG applier) and where verify runs it.",
        _str,
    ),
    Variable(
        "gpuprov_python",
        "python3",
        "Python interpreter on the host that runs the agent (needs only the standard library).",
        _str,
    ),
    # --- Kubernetes node handling
    Variable(
        "kubeconfig",
        None,
        "Local kubeconfig: cordon and drain the node around a disruptive change.",
        _optional(_str),
    ),
    Variable(
        "kube_node_name",
        None,
        "Kubernetes node name; None uses the inventory host name.",
        _optional(_str),
    ),
    Variable("drain_timeout", 300, "Seconds allowed for `kubectl drain`.", _int(1)),
]

# --- time limits: every remote step has one, so a stuck mirror, a hung command or a host that
# drops off fails that host, named, and the rest of the fleet goes on (docs/variables.md).
_VARIABLES += [
    Variable(
        "gpuprov_timeout_step",
        120,
        "Seconds any remote step may run when no limit below is its own "
        "(file writes, small commands, reading the host's state).",
        _int(1),
    ),
    Variable(
        "gpuprov_timeout_apt_update",
        300,
        "Seconds for `apt-get update` after a repository changed (index downloads).",
        _int(1),
    ),
    Variable(
        "gpuprov_timeout_packages",
        900,
        "Seconds for installing pinned packages (package downloads and maintainer scripts).",
        _int(1),
    ),
    Variable(
        "gpuprov_timeout_service",
        300,
        "Seconds for starting, restarting or reloading a daemon.",
        _int(1),
    ),
    Variable(
        "gpuprov_timeout_mig",
        600,
        "Seconds for the agent to apply a MIG layout (GPU resets included).",
        _int(1),
    ),
    Variable(
        "gpuprov_timeout_probe",
        60,
        "Seconds for the agent's probe in `gpuprov verify`.",
        _int(1),
    ),
    Variable(
        "gpuprov_ssh_dead_after",
        30,
        "Seconds without an answer after which a connected host counts as gone (SSH "
        "keepalives every third of it); it is failed within about 4/3 of this.",
        _int(3),
    ),
]

VARIABLES: dict[str, Variable] = {v.name: v for v in _VARIABLES}

# Prefixes that mark a key as gpuprov's: an unknown key with one of them is an error.
AREAS = (
    "gpuprov_",
    "gpu_",
    "driver_",
    "container_",
    "containerd_",
    "time_slicing_",
    "device_plugin_",
    "mig_",
    "kubelet_",
    "kube_",
)


def suggest(key: str) -> str | None:
    """The gpuprov key a misspelt ``key`` probably meant, or None."""
    close = difflib.get_close_matches(key, list(VARIABLES), n=1, cutoff=0.8)
    return close[0] if close else None


def is_ours(key: str) -> bool:
    """Whether ``key`` looks like a gpuprov key (known, or in one of gpuprov's areas)."""
    return key in VARIABLES or key.startswith(AREAS)
