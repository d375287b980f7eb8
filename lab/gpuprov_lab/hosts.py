"""One lab host: an overlay on the base, its own network namespace, systemd booted by nspawn.

``start`` mounts the host's overlay, writes what makes it this host (name, addresses, SSH keys,
simulated hardware, its kubelet and device plugin units) and boots it through ``launcher.sh``;
``stop`` powers it off cleanly and kills whatever is left, by pid, before unmounting.

The real kubelet and NVIDIA's device plugin are read-only binds of the controller's cached
binaries (``--bind-ro``): 84 MB and 21 MB that no host copies into its overlay.

>>> nspawn_argv(RunDir(Path("/tmp/gpuprov-lab")).host("lab-a100-01"), "lab-a100-01", 1)[:3]
['systemd-nspawn', '--quiet', '--directory=/tmp/gpuprov-lab/hosts/lab-a100-01/root']
>>> nspawn_argv(HostDir(Path("/h")), "h", 1, KubeParts(Path("/c/kubelet"), Path("/c/dp")))[-2:]
['--bind-ro=/c/kubelet:/usr/bin/kubelet', '--bind-ro=/c/dp:/usr/bin/nvidia-device-plugin']
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpuprov_lab import (
    hardware,
    images,
    kubelet_unit,
    network,
    plugin_service,
    procs,
    vgpu_plugin_service,
)
from gpuprov_lab import ssh as ssh_
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import HostDir, RunDir
from gpuprov_lab.sim.caps import mig_minors
from gpuprov_lab.spec import LabHost

LAUNCHER = Path(__file__).with_name("launcher.sh")


@dataclass(frozen=True)
class KubeParts:
    """The controller's binaries every host runs, bound read-only into it, and the image
    archives its containerd imports."""

    kubelet: Path
    device_plugin: Path
    images: tuple[images.Archive, ...] = ()
    # HAMi's and Volcano's plugins (vgpu_plugin_service.binds): host path -> controller path.
    vgpu_plugins: tuple[tuple[str, str], ...] = ()
    # The kubeconfig of vgpu_plugin_service.IDENTITY, on the controller.
    vgpu_kubeconfig: Path | None = None

    def binds(self) -> dict[str, str]:
        """Host path -> controller path."""
        return {
            kubelet_unit.KUBELET: str(self.kubelet),
            plugin_service.PLUGIN: str(self.device_plugin),
            **dict(self.vgpu_plugins),
        }


# With `gpuprov lab up --no-kube` there is no cluster: these units stand where the kubelet's and
# the plugin's are, running only `sleep`, so the deploy's `restart kubelet` and the plugin's
# reload (what the deploy does, not what follows) still find a running unit. A plain long-running
# service, as the real ones are: a oneshot unit's restart failed once in 64 first deploys of 16
# hosts at once (not reproduced by hand).
_NO_KUBE_UNIT = """[Unit]
Description={what} (none: `gpuprov lab up --no-kube`)

[Service]
ExecStart=/bin/sleep infinity
ExecReload=/bin/true

[Install]
WantedBy=multi-user.target
"""


# systemd in every booted host draws inotify instances from root's single machine-wide pool
# (fs.inotify.max_user_instances, 128 by default). Sixteen hosts exhaust it: systemd logs
# "Failed to create inotify object: Too many open files" and the last host never starts sshd.
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_HOST = 64


def ensure_inotify(count: int) -> None:
    """Raise the machine's inotify instance limit (never lower it) so ``count`` hosts boot."""
    wanted = 128 + INOTIFY_PER_HOST * count
    if int(INOTIFY_INSTANCES.read_text()) < wanted:
        INOTIFY_INSTANCES.write_text(f"{wanted}\n")


def start(run: RunDir, host: LabHost, base: Path, kube: KubeParts | None) -> None:
    """Create, configure and boot ``host``; returns once systemd-nspawn runs (not yet SSH).

    ``kube``: the kubelet and device plugin it runs, its kubelet's kubeconfig already made in
    ``run.node_kubeconfig(host.name)``; None for a lab without Kubernetes.
    """
    hd = run.host(host.name)
    for d in (hd.upper, hd.work, hd.root):
        d.mkdir(parents=True, exist_ok=True)
    network.add_host(host.index, host.ip)
    _mount(base, hd)
    root = hd.root
    (root / "etc/hostname").write_text(host.name + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{host.ip} {host.name}\n")
    ssh = root / "root/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(run.key.with_suffix(".pub"), ssh / "authorized_keys")
    (ssh / "authorized_keys").chmod(0o600)
    ssh_.install_host_key(run, host.ip, root / "etc/ssh")
    hardware.install(host, root)
    if host.containerd:
        install_containerd(root, Path(host.containerd))
    if kube is None:
        for unit, what in ((kubelet_unit.UNIT, "kubelet"), (plugin_service.UNIT, "device plugin")):
            kubelet_unit.put(root, unit, _NO_KUBE_UNIT.format(what=what).encode())
            kubelet_unit.enable(root, unit)
    else:
        subnet = kubelet_unit.pod_subnet(host.index)
        kubelet_unit.configure(root, host.name, run.node_kubeconfig(host.name), pod_subnet=subnet)
        plugin_service.configure(root, mig_minors(host.count))
        if kube.vgpu_kubeconfig is not None:
            vgpu_plugin_service.configure(root, host.name, kube.vgpu_kubeconfig)
        images.install(root, list(kube.images))
    argv = nspawn_argv(hd, host.name, host.index, kube)
    procs.start(
        ["bash", str(LAUNCHER), str(hd.nspawn_pid), *argv],
        hd.launcher_pid,
        log=hd.console,
    )


def install_containerd(root: Path, binary: Path) -> None:
    """Run ``binary`` as the host's containerd (Debian's ctr and runc shim stay): installed
    ahead of /usr/bin on PATH, and the unit pointed at it."""
    target = root / "usr/local/bin/containerd"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(binary, target)
    target.chmod(0o755)
    unit = root / "etc/systemd/system/containerd.service.d/gpuprov-lab.conf"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text("[Service]\nExecStart=\nExecStart=/usr/local/bin/containerd\n")


def nspawn_argv(hd: HostDir, name: str, index: int, kube: KubeParts | None = None) -> list[str]:
    # --register=no and --keep-unit: the machine's PID 1 need not be systemd (no machined, no
    # system bus); --resolv-conf=off keeps the base's resolv.conf that points at nothing.
    # --private-network beside --network-namespace-path: the namespace is the host's alone, so
    # nspawn keeps CAP_NET_ADMIN and a writable /proc/sys/net for it, which the pods' CNI
    # bridge needs (without: 'failed to create bridge "cni0": could not add "cni0": operation
    # not permitted'). systemd 252 accepts the pair; later releases document it
    # (nspawn.c: "cannot be combined with other network options (except --private-network)").
    binds = kube.binds() if kube else {}
    return [
        "systemd-nspawn",
        "--quiet",
        f"--directory={hd.root}",
        f"--machine={name}",
        "--boot",
        f"--network-namespace-path={network.netns_path(index)}",
        "--private-network",
        "--register=no",
        "--keep-unit",
        "--resolv-conf=off",
        "--console=passive",
        *(f"--bind-ro={source}:{target}" for target, source in binds.items()),
    ]


def stop(hd: HostDir) -> None:
    """Power the host off (SIGTERM to nspawn), kill leftovers by pid, unmount its overlay."""
    # The launcher first, or it would boot the host again; then an orderly poweroff.
    procs.stop(hd.launcher_pid, sig=signal.SIGKILL)
    procs.stop(hd.nspawn_pid, sig=signal.SIGTERM, timeout=15.0)
    if _mounted(hd.root):
        result = subprocess.run(["umount", str(hd.root)], capture_output=True, text=True)
        if result.returncode != 0:
            raise LabError(f"umount {hd.root}: {result.stderr.strip()}")


def _mount(base: Path, hd: HostDir) -> None:
    result = subprocess.run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={base},upperdir={hd.upper},workdir={hd.work}",
            str(hd.root),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise LabError(f"mounting the overlay of {hd.path.name}: {result.stderr.strip()}")


def _mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines()
    )


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (what `down` must leave none of)."""
    prefix = str(path).rstrip("/") + "/"
    return [
        line.split()[1]
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(prefix)
    ]
