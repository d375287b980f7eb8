"""What ``gpuprov_lab.kubelet_unit`` and ``gpuprov_lab.plugin_service`` put into a lab host's root.

That these files make a Ready Node with the planned allocatable is shown by the real kubelet and
plugin in tests/test_kubelet_in_container.py; here: their content, without root or binaries.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from gpuprov_lab import kubelet_unit as kubelet
from gpuprov_lab import plugin_service as device_plugin

from gpuprov.host.contract import DEVICE_PLUGIN_CONFIG_PATH, KUBELET_CONFIG_PATH


def _kubeconfig(tmp_path: Path) -> Path:
    for name in ("ca.crt", "node.crt", "node.key"):
        (tmp_path / name).write_text(f"PEM of {name}")
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {
                    "server": "https://10.200.0.1:16443",
                    "certificate-authority": str(tmp_path / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": "system:node:n1",
                "user": {
                    "client-certificate": str(tmp_path / "node.crt"),
                    "client-key": str(tmp_path / "node.key"),
                },
            }
        ],
    }
    path = tmp_path / "node.kubeconfig"
    path.write_text(json.dumps(document))
    return path


def test_install_gives_the_host_a_kubeconfig_that_needs_none_of_the_controllers_files(tmp_path):
    root, binary = tmp_path / "root", tmp_path / "kubelet"
    binary.write_bytes(b"\x7fELF")
    kubelet.install(root, "n1", binary, _kubeconfig(tmp_path))
    written = (root / kubelet.KUBECONFIG.lstrip("/")).read_text()
    assert str(tmp_path) not in written
    document = json.loads(written)
    assert document["users"][0]["user"]["client-key-data"] == "UEVNIG9mIG5vZGUua2V5"
    assert document["clusters"][0]["cluster"]["server"] == "https://10.200.0.1:16443"
    assert os.stat(root / kubelet.KUBECONFIG.lstrip("/")).st_mode & 0o777 == 0o600


def test_install_enables_the_kubelet_unit_named_for_the_node_with_the_kernel_values_it_wants(
    tmp_path,
):
    root, binary = tmp_path / "root", tmp_path / "kubelet"
    binary.write_bytes(b"\x7fELF")
    kubelet.install(root, "n1", binary, _kubeconfig(tmp_path), port=20250, healthz_port=20248)
    link = root / "etc/systemd/system/multi-user.target.wants/kubelet.service"
    assert os.readlink(link) == kubelet.UNIT
    unit = (root / kubelet.UNIT.lstrip("/")).read_text()
    assert "--hostname-override=n1" in unit
    # No mount namespace of its own: a pod's token tmpfs must be where containerd looks.
    assert "BindReadOnlyPaths" not in unit and "PrivateMounts" not in unit
    for name, value in kubelet.KERNEL_TUNABLES.items():
        source = f"{kubelet.KERNEL_DIR}/{name.replace('/', '.')}"
        assert f"|| mount --bind -o ro {source} /proc/sys/{name}'\n" in unit
        assert (root / source.lstrip("/")).read_text() == f"{value}\n"
    config = yaml.safe_load((root / KUBELET_CONFIG_PATH.lstrip("/")).read_text())
    assert (config["port"], config["healthzPort"]) == (20250, 20248)
    assert config["enforceNodeAllocatable"] == ["none"]
    assert (root / kubelet.KUBELET.lstrip("/")).stat().st_mode & 0o111
    assert json.loads((root / kubelet.CNI_CONFIG.lstrip("/")).read_text())["plugins"]


def _kmsg_step(tmp_path: Path) -> list[str]:
    """The unit's /dev/kmsg step as a command, pointed at ``tmp_path/kmsg`` instead."""
    pre = [
        line
        for line in kubelet.unit("n1").splitlines()
        if line.startswith("ExecStartPre=") and "/dev/kmsg" in line
    ]
    assert len(pre) == 1, pre
    return shlex.split(
        pre[0].removeprefix("ExecStartPre=-").replace("/dev/kmsg", str(tmp_path / "kmsg"))
    )


def test_the_kubelet_unit_links_dev_kmsg_to_the_console_where_the_host_has_none(tmp_path):
    subprocess.run(_kmsg_step(tmp_path), check=True, timeout=10)
    assert os.readlink(tmp_path / "kmsg") == "/dev/console"


def test_the_kubelet_unit_keeps_a_dev_kmsg_the_host_has(tmp_path):
    # A host whose simulated driver keeps a kernel log has /dev/kmsg linked to that log.
    (tmp_path / "kernel.log").write_text("")
    (tmp_path / "kmsg").symlink_to(tmp_path / "kernel.log")
    subprocess.run(_kmsg_step(tmp_path), check=True, timeout=10)
    assert os.readlink(tmp_path / "kmsg") == str(tmp_path / "kernel.log")


def test_configure_writes_everything_but_the_binary_which_the_host_gets_as_a_bind(tmp_path):
    kubelet.configure(tmp_path / "root", "n1", _kubeconfig(tmp_path))
    assert (tmp_path / "root" / kubelet.UNIT.lstrip("/")).is_file()
    assert not (tmp_path / "root" / kubelet.KUBELET.lstrip("/")).exists()


def test_device_plugin_unit_reads_gpuprovs_config_and_sees_the_mig_minors_under_proc(tmp_path):
    root = tmp_path / "root"
    (tmp_path / "plugin").write_bytes(b"\x7fELF")
    (tmp_path / "libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    device_plugin.install(
        root, tmp_path / "plugin", tmp_path / "libnvidia-ml.so.1", "config 1\nmonitor 2\n"
    )
    unit = (root / device_plugin.UNIT.lstrip("/")).read_text()
    assert f"ExecStart={device_plugin.LAUNCHER} start\n" in unit
    launcher = (root / device_plugin.LAUNCHER.lstrip("/")).read_text()
    assert f"--config-file={DEVICE_PLUGIN_CONFIG_PATH}" in launcher
    assert f"Environment=LD_LIBRARY_PATH={device_plugin.LIBRARY_DIR}\n" in unit
    assert f"BindReadOnlyPaths={device_plugin.CAPS_DIR}:/proc/driver/nvidia-caps\n" in unit
    caps = root / device_plugin.CAPS_DIR.lstrip("/") / "mig-minors"
    assert caps.read_text() == "config 1\nmonitor 2\n"
    library = root / device_plugin.LIBRARY_DIR.lstrip("/") / "libnvidia-ml.so.1"
    assert library.is_file()
    link = root / "etc/systemd/system/multi-user.target.wants/nvidia-device-plugin.service"
    assert os.readlink(link) == device_plugin.UNIT


def test_a_lab_host_plugin_takes_nvml_from_the_driver_package_and_waits_for_it(tmp_path):
    device_plugin.configure(tmp_path, "config 1\n")
    unit = (tmp_path / device_plugin.UNIT.lstrip("/")).read_text()
    assert "LD_LIBRARY_PATH" not in unit
    assert "Environment=FAIL_ON_INIT_ERROR=false\n" in unit
    assert not (tmp_path / device_plugin.PLUGIN.lstrip("/")).exists()  # bound by nspawn


def _reload_signal(tmp_path: Path, *argv: str) -> int:
    """The signal the launcher's reload sends a process started as ``argv`` (on this machine,
    where the plugin's config file does not exist)."""
    assert not Path(DEVICE_PLUGIN_CONFIG_PATH).exists()
    script = tmp_path / "launcher.sh"
    script.write_text(device_plugin.launcher())
    received = tmp_path / "signal"
    catcher = (
        "import signal, sys, time\n"
        f"def got(n, _): open({str(received)!r}, 'w').write(str(n)); sys.exit(0)\n"
        "signal.signal(signal.SIGHUP, got); signal.signal(signal.SIGTERM, got)\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", catcher, *argv], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline() == "ready\n"
        subprocess.run(["sh", str(script), "reload", str(process.pid)], check=True, timeout=10)
        process.wait(timeout=10)
    finally:
        process.kill()
    return int(received.read_text())


def test_reload_sends_sighup_when_the_config_file_is_as_at_the_start(tmp_path):
    assert _reload_signal(tmp_path) == signal.SIGHUP


def test_reload_ends_the_plugin_when_its_config_file_went_since_the_start(tmp_path):
    # SIGHUP would make it re-read a file that is gone; systemd starts it again without.
    given = f"--config-file={DEVICE_PLUGIN_CONFIG_PATH}"
    assert _reload_signal(tmp_path, given) == signal.SIGTERM


def test_config_manager_gets_the_configmap_data_as_files_and_runs_before_and_beside_the_plugin(
    tmp_path,
):
    root = tmp_path / "root"
    (tmp_path / "config-manager").write_bytes(b"\x7fELF")
    configs = {"whole": "version: v1\n", "shared-r4": "version: v1\nsharing: {}\n"}
    device_plugin.install_config_manager(
        root, tmp_path / "config-manager", "node-1", configs, "whole"
    )
    source = root / device_plugin.CONFIG_DIR.lstrip("/")
    assert {p.name: p.read_text() for p in source.iterdir()} == configs
    unit = (root / device_plugin.CONFIG_MANAGER_UNIT.lstrip("/")).read_text()
    assert f"--config-file-dst={DEVICE_PLUGIN_CONFIG_PATH} " in unit
    assert "--process-to-signal=nvidia-device-plugin\n" in unit  # argv[0], compared whole
    assert "--node-name=node-1 " in unit and "--default-config=whole " in unit
    drop_in = root / f"{device_plugin.UNIT}.d/config-manager-init.conf".lstrip("/")
    init = drop_in.read_text()
    # Only while the file is missing, as the chart's init container runs once per pod.
    assert f"test -e {DEVICE_PLUGIN_CONFIG_PATH} || exec " in init
    assert "--oneshot --send-signal=false'\n" in init
    assert (root / DEVICE_PLUGIN_CONFIG_PATH.lstrip("/")).parent.is_dir()
    assert not (root / DEVICE_PLUGIN_CONFIG_PATH.lstrip("/")).exists()  # config-manager's to make
    wants = root / "etc/systemd/system/multi-user.target.wants"
    assert os.readlink(wants / Path(device_plugin.CONFIG_MANAGER_UNIT).name) == (
        device_plugin.CONFIG_MANAGER_UNIT
    )
