"""NVIDIA's real device plugin in a lab host, over the simulated ``libnvidia-ml.so.1``.

The plugin (v0.20.0) loads ``libnvidia-ml.so.1`` at run time; the unit points
``LD_LIBRARY_PATH`` at the simulated one, which reads the host's simulator state file
(``SIM_ENV`` = ``SIM_STATE_PATH``). It reads the config file gpuprov writes
(``DEVICE_PLUGIN_CONFIG_PATH``) and registers with the kubelet on
``/var/lib/kubelet/device-plugins/kubelet.sock``.

>>> "LD_LIBRARY_PATH=/usr/local/lib/gpuprov-sim" in unit()
True
"""

from __future__ import annotations

from pathlib import Path

from gpuprov.contract import DEVICE_PLUGIN_CONFIG_PATH, KUBELET_UNIT, SIM_ENV, SIM_STATE_PATH
from gpuprov.lab import kubelet

PLUGIN = "/usr/bin/nvidia-device-plugin"  # where the base's stand-in sits
UNIT = "/etc/systemd/system/nvidia-device-plugin.service"
LIBRARY_DIR = "/usr/local/lib/gpuprov-sim"
# The plugin reads /proc/driver/nvidia-caps/mig-minors to find each MIG device's capability
# device nodes (fixed path, its internal/mig package); /proc/driver is empty in a container and
# procfs takes no new files, so the unit mounts a tmpfs there and binds this directory in.
CAPS_DIR = "/etc/gpuprov-lab/nvidia-caps"


def unit() -> str:
    """The device plugin's systemd unit in a lab host."""
    return (
        "[Unit]\n"
        "Description=NVIDIA device plugin (real, over the simulated NVML)\n"
        f"After={KUBELET_UNIT}\n"
        "\n"
        "[Service]\n"
        f"Environment=LD_LIBRARY_PATH={LIBRARY_DIR}\n"
        f"Environment={SIM_ENV}={SIM_STATE_PATH}\n"
        # Health checks wait on NVML events (nvmlEventSetCreate...), which the simulated
        # library answers NVML_ERROR_NOT_SUPPORTED: no events to watch.
        "Environment=DP_DISABLE_HEALTHCHECKS=all\n"
        "TemporaryFileSystem=/proc/driver\n"
        f"BindReadOnlyPaths={CAPS_DIR}:/proc/driver/nvidia-caps\n"
        f"ExecStart={PLUGIN} --config-file={DEVICE_PLUGIN_CONFIG_PATH}\n"
        # The plugin re-reads its config on SIGHUP.
        "ExecReload=/bin/kill -HUP $MAINPID\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def install(root: Path, plugin: Path, library: Path, mig_minors: str) -> None:
    """Put the real ``plugin``, the simulated ``library`` and the MIG minors into ``root``.

    ``mig_minors``: the text of ``mig-minors`` for the host's GPUs (``gpuprov.sim.caps``).
    The state file and the plugin's config are the host's own (the lab's hardware, the deploy).
    """
    kubelet.put(root, PLUGIN, plugin.read_bytes(), mode=0o755)
    kubelet.put(root, f"{LIBRARY_DIR}/libnvidia-ml.so.1", library.read_bytes())
    kubelet.put(root, f"{CAPS_DIR}/mig-minors", mig_minors.encode())
    kubelet.put(root, UNIT, unit().encode())
    kubelet.enable(root, UNIT)
