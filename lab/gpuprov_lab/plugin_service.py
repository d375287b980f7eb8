"""NVIDIA's real device plugin in a lab host, over the simulated ``libnvidia-ml.so.1``.

The plugin (v0.20.0) loads ``libnvidia-ml.so.1`` at run time; the unit points
``LD_LIBRARY_PATH`` at the simulated one, which reads the host's simulator state file
(``SIM_ENV`` = ``SIM_STATE_PATH``). Its health checks are on, as in the chart: they wait on the
simulated NVML's events, so an XID injected with ``gpuprov-sim inject xid`` marks that GPU's
devices unhealthy until the plugin restarts (docs/health.md). It reads the config file gpuprov writes
(``DEVICE_PLUGIN_CONFIG_PATH``) and registers with the kubelet on
``/var/lib/kubelet/device-plugins/kubelet_unit.sock``. NVIDIA's ``config-manager`` (the chart's
sidecar) can run beside it and choose that config from the node's label
(``install_config_manager``).

``gpuprov lab up`` runs the build in the project's ``shared/bin`` (its README lists each
binary's release tag and sha256; ``binary``), unless ``--device-plugin PATH`` names another: the
Go module proxy refuses ``github.com/NVIDIA/k8s-device-plugin`` here, so the project cannot build
it as it builds the kubelet (docs/kubernetes.md). ``GPUPROV_SHARED_BIN`` names that directory (a
git worktree has no ``../shared``).

>>> "LD_LIBRARY_PATH=/usr/local/lib/gpuprov-sim" in unit()
True
>>> sha256_from_readme("| `x.xz` | up | v1 | " + "ab" * 32 + " | MIT |", "x") == "ab" * 32
True
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
from pathlib import Path

from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIG_PATH,
    DEVICE_PLUGIN_PROGRAM,
    DEVICE_PLUGIN_UNIT,
    KUBELET_UNIT,
)
from gpuprov_lab import kubelet_unit
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import CACHE
from gpuprov_lab.sim.contract import SIM_ENV, SIM_STATE_PATH

PLUGIN = "/usr/bin/nvidia-device-plugin"
PROGRAM = DEVICE_PLUGIN_PROGRAM  # its argv[0] (launcher)
UNIT = f"/etc/systemd/system/{DEVICE_PLUGIN_UNIT}"
LIBRARY_DIR = "/usr/local/lib/gpuprov-sim"
LAUNCHER = "/usr/local/lib/gpuprov-lab/nvidia-device-plugin.sh"
# The plugin reads /proc/driver/nvidia-caps/mig-minors to find each MIG device's capability
# device nodes (fixed path, its internal/mig package); /proc/driver is empty in a container and
# procfs takes no new files, so the unit mounts a tmpfs there and binds this directory in.
CAPS_DIR = "/etc/gpuprov-lab/nvidia-caps"


BUILD = "nvidia-device-plugin"  # shared/bin/<BUILD>.xz


def default_binary() -> Path:
    """The plugin ``gpuprov lab up`` runs unless told otherwise: shared/bin's (v0.20.0)."""
    return binary(BUILD)


CHECKOUT = Path(__file__).resolve().parents[2]


def shared_bin() -> Path:
    return Path(os.environ.get("GPUPROV_SHARED_BIN", CHECKOUT.parent / "shared" / "bin"))


def binary(name: str) -> Path:
    """``shared/bin/<name>.xz`` decompressed into ``/var/tmp/gpuprov-bin/<name>-<sha256[:12]>``.

    Checked against the README's sha256 each time it is decompressed; a cached one is named by
    that sha256, so a new release in shared/bin is a new file, never a stale one.
    """
    source = shared_bin() / f"{name}.xz"
    if not source.is_file():
        raise LabError(
            f"no {source}: give the binary's path (`gpuprov lab up --device-plugin PATH`) or "
            "set GPUPROV_SHARED_BIN to the directory that holds it"
        )
    expected = sha256_from_readme((source.parent / "README.md").read_text(), name)
    if expected is None:
        raise LabError(f"{source.parent / 'README.md'} lists no sha256 for {name}.xz")
    target = CACHE / "gpuprov-bin" / f"{name}-{expected[:12]}"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_bytes(lzma.decompress(source.read_bytes()))
    got = hashlib.sha256(partial.read_bytes()).hexdigest()
    if got != expected:
        partial.unlink()
        raise LabError(f"{source} decompresses to sha256 {got}, its README says {expected}")
    partial.chmod(0o755)
    partial.replace(target)  # whole or not at all
    return target


def sha256_from_readme(text: str, name: str) -> str | None:
    """The sha256 in the README table's row of ``<name>.xz``."""
    for line in text.splitlines():
        if line.startswith(f"| `{name}.xz`"):
            match = re.search(r"\b[0-9a-f]{64}\b", line)
            if match:
                return match.group(0)
    return None


def unit(library_dir: str | None = LIBRARY_DIR) -> str:
    """The device plugin's systemd unit in a lab host.

    ``library_dir``: where its ``libnvidia-ml.so.1`` is; None for the one the dynamic loader
    finds, i.e. the driver package's (lab hosts: ``libnvidia-ml1`` of the lab's repository,
    which the deploy installs), so the plugin works once the driver is there, as on a real node.
    """
    library = f"Environment=LD_LIBRARY_PATH={library_dir}\n" if library_dir else ""
    return (
        "[Unit]\n"
        "Description=NVIDIA device plugin (real, over the simulated NVML)\n"
        f"After={KUBELET_UNIT}\n"
        "\n"
        "[Service]\n"
        f"{library}"
        f"Environment={SIM_ENV}={SIM_STATE_PATH}\n"
        # Before the driver is installed NVML does not load (ERROR_LIBRARY_NOT_FOUND, then
        # DRIVER_NOT_LOADED): the plugin then waits for a SIGHUP or a new kubelet socket
        # instead of exiting, which would end in systemd's start limit (a failed unit).
        "Environment=FAIL_ON_INIT_ERROR=false\n"
        "TemporaryFileSystem=/proc/driver\n"
        f"BindReadOnlyPaths={CAPS_DIR}:/proc/driver/nvidia-caps\n"
        f"ExecStart={LAUNCHER} start\n"
        f"ExecReload={LAUNCHER} reload $MAINPID\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def launcher() -> str:
    """The script the unit starts and reloads the plugin with.

    It starts the plugin by its bare name, so ``argv[0]`` is ``nvidia-device-plugin`` as in the
    chart's container, which config-manager's ``--process-to-signal`` matches exactly.
    The plugin stops at once when ``--config-file`` names no file ("error opening config
    file"), and gpuprov writes none on whole-card hosts, nor before its first deploy: the file
    is passed only when it exists. A SIGHUP makes the plugin re-read the file but keeps its
    command line, so a reload after the file came or went ends the plugin instead, and systemd
    starts it again (``Restart=always``) with the right one.

    >>> "exec kill -HUP" in launcher()
    True
    """
    config = DEVICE_PLUGIN_CONFIG_PATH
    return f"""#!/bin/sh
# {LAUNCHER} start | reload PID: NVIDIA's device plugin in a gpuprov lab host.
set -eu
# Started by name, so its argv[0] is {PROGRAM} as in the chart's image: config-manager finds
# the process to signal by that exact argv[0].
PATH={Path(PLUGIN).parent}:$PATH
case "$1" in
start)
  if [ -e {config} ]; then exec {PROGRAM} --config-file={config}; fi
  exec {PROGRAM} ;;
reload)
  given=no present=no
  if tr '\\0' '\\n' < "/proc/$2/cmdline" | grep -qx -- "--config-file={config}"; then given=yes; fi
  if [ -e {config} ]; then present=yes; fi
  if [ "$given" = "$present" ]; then exec kill -HUP "$2"; fi
  exec kill -TERM "$2" ;;
esac
"""


def install(root: Path, plugin: Path, library: Path, mig_minors: str) -> None:
    """Put the real ``plugin``, the simulated ``library`` and the MIG minors into ``root``.

    ``mig_minors``: the text of ``mig-minors`` for the host's GPUs (``gpuprov_lab.sim.caps``).
    The state file and the plugin's config are the host's own (the lab's hardware, the deploy).
    """
    kubelet_unit.put(root, PLUGIN, plugin.read_bytes(), mode=0o755)
    kubelet_unit.put(root, f"{LIBRARY_DIR}/libnvidia-ml.so.1", library.read_bytes())
    configure(root, mig_minors, LIBRARY_DIR)


def configure(root: Path, mig_minors: str, library_dir: str | None = None) -> None:
    """Everything of ``install`` but the binaries: for a lab host, which gets ``PLUGIN`` as a
    read-only bind and NVML from the driver package the deploy installs."""
    kubelet_unit.put(root, f"{CAPS_DIR}/mig-minors", mig_minors.encode())
    kubelet_unit.put(root, LAUNCHER, launcher().encode(), mode=0o755)
    kubelet_unit.put(root, UNIT, unit(library_dir).encode())
    kubelet_unit.enable(root, UNIT)


# NVIDIA's real config-manager, as the device plugin chart runs it beside the plugin: it watches its node's
# ``nvidia.com/device-plugin.config`` label through the API server, points the plugin's config
# file at ``<srcdir>/<label value>`` (a symlink) and sends the plugin SIGHUP, which makes the
# plugin re-read it. Here it is a systemd unit: ``CONFIG_DIR`` holds the device plugin ConfigMap's
# data, one file per key, as the chart's ConfigMap volume would; the plugin's config file
# (``DEVICE_PLUGIN_CONFIG_PATH``) is the symlink it manages.
#
# Flags and their meaning: ``cmd/config-manager/main.go`` of NVIDIA/k8s-device-plugin
# (https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/cmd/config-manager/main.go).
# It finds the process to signal by comparing each process's ``argv[0]`` with
# ``--process-to-signal`` (its ``findPidToSignal``, an exact comparison): the chart's value,
# ``nvidia-device-plugin``, which the launcher gives the plugin as its ``argv[0]``. It reads the Node with the node's own kubeconfig (the kubelet's): the
# Node authorizer lets a node get, list and watch its own Node object, which is all
# config-manager does (a watch with ``fieldSelector=metadata.name=<node>``); the chart gives it a
# service account with the same rights on nodes.
CONFIG_MANAGER = "/usr/local/bin/config-manager"
CONFIG_MANAGER_UNIT = "/etc/systemd/system/nvidia-device-plugin-config-manager.service"
CONFIG_MANAGER_INIT_DROP_IN = "config-manager-init.conf"  # in the plugin unit's .d directory
CONFIG_DIR = "/etc/gpuprov-lab/device-plugin-configs"  # the ConfigMap's data, as mounted


def config_manager_unit(node: str, default_config: str) -> str:
    """The config-manager's systemd unit for ``node``; ``default_config`` when unlabelled.

    >>> "--node-label=nvidia.com/device-plugin.config" in config_manager_unit("node-1", "whole")
    True
    """
    return (
        "[Unit]\n"
        "Description=NVIDIA device plugin config-manager (real)\n"
        f"After={Path(UNIT).name}\n"
        "\n"
        "[Service]\n"
        f"ExecStart={config_manager_command(node, default_config)}"
        f" --send-signal=true --signal=1 --process-to-signal={PROGRAM}\n"
        # It exits on an error (a label naming no config, no plugin to signal yet); the chart's
        # pod restarts it, as Restart= does here.
        "Restart=always\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def config_manager_init(node: str, default_config: str) -> str:
    """A drop-in for the plugin's unit: config-manager once, before the plugin starts.

    The chart's init container (``config-manager-init``: ``--oneshot``, no signal), so the
    plugin never starts without its config file. ``--oneshot`` waits for the Node to exist.
    Like the init container, which runs once per pod and not when the plugin's container
    restarts, it runs only while the plugin's config file is missing (the pod's fresh
    ``emptyDir``): oneshot never sees the label and links the default, so running it at every
    restart would undo the sidecar's choice (measured in the lab: a plugin that a SIGHUP ended
    before it handled signals came back on ``whole``, and the sidecar, waiting for the next
    label change, left it there).

    >>> "--oneshot --send-signal=false" in config_manager_init("node-1", "whole")
    True
    """
    command = config_manager_command(node, default_config)
    first = f"test -e {DEVICE_PLUGIN_CONFIG_PATH} || exec {command} --oneshot --send-signal=false"
    return f"[Service]\nExecStartPre=/bin/sh -c '{first}'\n"


def config_manager_command(node: str, default_config: str) -> str:
    """config-manager's command line for ``node``, without its mode and signal flags.

    >>> "--node-name=node-1" in config_manager_command("node-1", "whole")
    True
    """
    return (
        f"{CONFIG_MANAGER} --kubeconfig={kubelet_unit.KUBECONFIG} --node-name={node}"
        f" --node-label={DEVICE_PLUGIN_CONFIG_LABEL} --config-file-srcdir={CONFIG_DIR}"
        f" --config-file-dst={DEVICE_PLUGIN_CONFIG_PATH} --default-config={default_config}"
    )


def install_config_manager(
    root: Path, binary: Path, node: str, configs: dict[str, str], default_config: str
) -> None:
    """Put ``binary``, its unit and ``configs`` (ConfigMap key -> text) into the host ``root``.

    The plugin's config file is left to config-manager: it makes it a symlink into
    ``CONFIG_DIR`` before the plugin starts (``config_manager_init``) and whenever the label
    changes, then signals the plugin.
    """
    kubelet_unit.put(root, CONFIG_MANAGER, binary.read_bytes(), mode=0o755)
    # config-manager makes the symlink, not its directory.
    (root / DEVICE_PLUGIN_CONFIG_PATH.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    for name, text in configs.items():
        kubelet_unit.put(root, f"{CONFIG_DIR}/{name}", text.encode())
    kubelet_unit.put(root, CONFIG_MANAGER_UNIT, config_manager_unit(node, default_config).encode())
    kubelet_unit.enable(root, CONFIG_MANAGER_UNIT)
    init = config_manager_init(node, default_config)
    kubelet_unit.put(root, f"{UNIT}.d/{CONFIG_MANAGER_INIT_DROP_IN}", init.encode())
