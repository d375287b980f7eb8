"""The real kubelet in a lab host: its config document, flags, systemd unit and the files around it.

A lab host is a Debian container booted by systemd-nspawn (``hosts.py``). Run there, the
kubelet v1.34.4 stops on what a container does not give it; each setting below says what failed
without it (measured in tests/test_kubelet_in_container.py, listed in docs/kubernetes.md, "A real
kubelet in a lab host"). It registers the Node, serves the device plugins and runs pods through
the host's containerd: the pod network is the CNI config here (Debian's bridge and host-local
plugins, in the lab base), the images are the lab's own (``images.py``), and the low-level
runtime is crun without cgroups (``node/runc``).

``install`` writes everything into a host's root before it boots:

>>> unit("lab-a100-01").splitlines()[0]
'[Unit]'
>>> config()["cgroupsPerQOS"]
False
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from gpuprov.host.contract import (
    CONTAINERD_UNIT,
    CRI_SOCKETS,
    KERNEL_LOG_PATH,
    KUBELET_CONFIG_PATH,
    KUBELET_UNIT,
)

KUBELET = "/usr/bin/kubelet"
KUBECONFIG = "/etc/kubernetes/kubelet.kubeconfig"
CLIENT_CA = "/etc/kubernetes/pki/ca.crt"  # the lab CA: who may call the kubelet's API
CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"  # gpuprov's drop-in goes here (kubelet_config_dir)
UNIT = f"/etc/systemd/system/{KUBELET_UNIT}"
CNI_CONFIG = "/etc/cni/net.d/10-gpuprov-lab.conflist"
CONTAINERD_SOCKET = f"unix://{CRI_SOCKETS['containerd']}"  # the socket gpuprov's probe asks too

# The values the kubelet insists on (kubernetes pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables): it reads each and writes it when different. /proc/sys is read-only in an
# nspawn container ("open /proc/sys/vm/overcommit_memory: read-only file system" ->
# "Failed to start ContainerManager", exit), and these sysctls are not namespaced, so writing them
# would change the whole machine (kernel.panic_on_oops=1 turns any oops into a panic). The unit
# binds a file with the value the kubelet expects over each, in the lab host (a container: the
# machine's own /proc/sys is not touched): the kubelet reads what it wants and the machine's
# kernel stays as it is. The binds are made by ExecStartPre, not systemd's BindReadOnlyPaths=,
# which would give the kubelet a mount namespace of its own: the tmpfs it mounts for a pod's
# service-account token (a projected volume) would then stay in that namespace, and containerd,
# in the host's, would give the container the empty directory under it (seen: a pod's
# /var/run/secrets/kubernetes.io/serviceaccount empty, its in-cluster kubectl falling back to
# localhost:8080). MountFlags=shared does not help: systemd makes the namespace a slave first.
# KubeletInUserNamespace does not help: it only ignores these errors inside a user namespace.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}
KERNEL_DIR = "/etc/gpuprov-lab/kernel"


def config(port: int = 10250, healthz_port: int = 10248) -> dict:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of a lab host.

    ``port`` and ``healthz_port``: a host in the machine's own network namespace (the test's)
    needs free ones; lab hosts have their own namespace and keep the defaults.
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The kubelet's API (logs, exec) answers the API server, whose client certificate the
        # lab CA signed, and nobody else: no anonymous caller, no token review.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": CLIENT_CA},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "port": port,
        "healthzPort": healthz_port,
        "containerRuntimeEndpoint": CONTAINERD_SOCKET,
        # Debian's containerd 1.6 runs runc with SystemdCgroup=false (cgroupfs) and cannot tell
        # the kubelet its driver ("unknown method RuntimeConfig for service
        # runtime.v1.RuntimeService"), so the kubelet's must be set to match.
        "cgroupDriver": "cgroupfs",
        # nspawn mounts the cgroup v1 controllers read-only ("mkdir
        # /sys/fs/cgroup/cpuset/kubepods: read-only file system" -> "Failed to start
        # ContainerManager"): no QoS cgroups, and nothing enforced on them.
        "cgroupsPerQOS": False,
        # ["none"], not []: with --config-dir the kubelet merges drop-ins over this file and an
        # empty list comes back as the default ["pods"], which then fails validation
        # ("cgroupsPerQOS ... must be set to true when "pods" contained in enforceNodeAllocatable").
        "enforceNodeAllocatable": ["none"],
        # The machine may have swap; no pod memory limit is enforced here (no cgroups), so
        # swap changes nothing the kubelet could account for.
        "failSwapOn": False,
        # The lab's images exist only as imported at boot (no registry is reachable): the
        # kubelet must never remove one to free the disk, which the hosts share with this
        # machine and its other work (85 %, the default, is no signal of the lab's own use).
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    }


def flags(node: str) -> list[str]:
    """The kubelet's command line: the Node's name must equal its certificate's (system:node:NAME)."""
    return [
        f"--config={KUBELET_CONFIG_PATH}",
        f"--config-dir={CONFIG_DIR}",
        f"--kubeconfig={KUBECONFIG}",
        f"--hostname-override={node}",
        "--v=2",
    ]


def unit(node: str) -> str:
    """The kubelet's systemd unit in a lab host."""
    binds = "".join(
        f"ExecStartPre=-/bin/sh -c 'grep -qx {value} /proc/sys/{name} || mount --bind -o ro "
        f"{KERNEL_DIR}/{name.replace('/', '.')} /proc/sys/{name}'\n"
        for name, value in KERNEL_TUNABLES.items()
    )
    return (
        "[Unit]\n"
        "Description=kubelet (real, gpuprov lab)\n"
        f"After={CONTAINERD_UNIT}\n"
        f"Wants={CONTAINERD_UNIT}\n"
        # As kubeadm's kubelet.service: no start limit. The kubelet exits while containerd
        # restarts (a deploy changed its config) and comes back every RestartSec; with systemd's
        # default limit (5 starts in 10 s) that loop ends in a unit that refuses the deploy's
        # `systemctl restart` (seen once in CI on a containerd-change deploy).
        "StartLimitIntervalSec=0\n"
        "\n"
        "[Service]\n"
        # The OOM watcher opens /dev/kmsg, which nspawn does not give a container ("failed to
        # create kubelet: open /dev/kmsg: no such file or directory"); kind links it to the
        # console the same way. Only when none exists: the simulated driver links it to its
        # kernel log (lab/gpuprov_lab/packages/driver/nvidia-sim-kmsg).
        # -f: a link whose target is gone (the simulated log) is replaced, never an error that
        # fails the kubelet's start.
        # "-": a step that fails does not fail the start. In these nspawn hosts systemd at times
        # cannot put a new process in the unit's cgroup right after the last one was removed
        # ("Failed to attach ... to compat systemd cgroup", "Failed to kill control group ...:
        # Input/output error" in the journal on a restart); a step that meets it exits 219/CGROUP,
        # and the deploy's `systemctl restart kubelet` failed with "the control process exited
        # with error code" (seen once in CI). The steps are idempotent: a kubelet started
        # without them exits, and Restart= runs them again 2 s later. kubeadm's own unit has no
        # ExecStartPre; these are the lab's.
        f"ExecStartPre=-/bin/sh -c '[ -e {KERNEL_LOG_PATH} ] || ln -sfn /dev/console {KERNEL_LOG_PATH}'\n"
        f"{binds}"
        f"ExecStart={KUBELET} {' '.join(flags(node))}\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def pod_subnet(index: int) -> str:
    """The pod addresses of the lab host numbered ``index`` (1, 2, ...): one /24 each, so no
    two pods of the cluster share an address.

    >>> pod_subnet(3)
    '10.244.3.0/24'
    """
    return f"10.244.{index}.0/24"


def cni_conflist(subnet: str = "10.244.0.0/24") -> str:
    """The pod network: a bridge ``cni0`` in the host's own network namespace, each pod on it
    with an address of ``subnet`` (Debian's containernetworking-plugins ``bridge`` and
    ``host-local``, which containerd runs for every pod sandbox). Without a network config the
    Node stays NotReady ("container runtime network not ready: ... cni plugin not
    initialized"). Pods reach each other on the host and nothing else: there is no route
    between hosts' pod networks and no NAT (the lab's network has none)."""
    network = {
        "cniVersion": "1.0.0",
        "name": "gpuprov-lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]]},
            }
        ],
    }
    return json.dumps(network, indent=2) + "\n"


def self_contained(kubeconfig: Path) -> dict:
    """``kubeconfig`` with its certificate files embedded (``*-data``): the host sees none of the
    controller's paths.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); (d / "ca.crt").write_text("CA")
    2
    >>> doc = {"clusters": [{"cluster": {"certificate-authority": str(d / "ca.crt")}}], "users": []}
    >>> (d / "k").write_text(json.dumps(doc)) and self_contained(d / "k")["clusters"]
    [{'cluster': {'certificate-authority-data': 'Q0E='}}]
    """
    document = json.loads(kubeconfig.read_text())
    for entry, fields in (
        *((c["cluster"], ("certificate-authority",)) for c in document["clusters"]),
        *((u["user"], ("client-certificate", "client-key")) for u in document["users"]),
    ):
        for field in fields:
            if field in entry:
                data = Path(entry.pop(field)).read_bytes()
                entry[f"{field}-data"] = base64.b64encode(data).decode()
    return document


def install(
    root: Path,
    node: str,
    kubelet: Path,
    kubeconfig: Path,
    *,
    port: int = 10250,
    healthz_port: int = 10248,
) -> None:
    """Put the real ``kubelet`` and everything it needs into the host root ``root`` (not booted).

    ``kubeconfig``: on the controller, for identity ``system:node:<node>``
    (``ControlPlane.kubeconfig(path, node_identity(node))``).
    """
    put(root, KUBELET, kubelet.read_bytes(), mode=0o755)
    configure(root, node, kubeconfig, port=port, healthz_port=healthz_port)


def configure(
    root: Path,
    node: str,
    kubeconfig: Path,
    *,
    port: int = 10250,
    healthz_port: int = 10248,
    pod_subnet: str = "10.244.0.0/24",
) -> None:
    """Everything of ``install`` but the binary: for a host that gets ``KUBELET`` as a read-only
    bind (``systemd-nspawn --bind-ro``, as lab hosts do), so an 84 MB binary is not copied into
    every host."""
    document = self_contained(kubeconfig)
    put(root, KUBECONFIG, json.dumps(document).encode(), mode=0o600)
    ca = document["clusters"][0]["cluster"]["certificate-authority-data"]
    put(root, CLIENT_CA, base64.b64decode(ca))
    put(
        root,
        KUBELET_CONFIG_PATH,
        yaml.safe_dump(config(port, healthz_port), sort_keys=False).encode(),
    )
    (root / CONFIG_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for name, value in KERNEL_TUNABLES.items():
        put(root, f"{KERNEL_DIR}/{name.replace('/', '.')}", f"{value}\n".encode())
    put(root, CNI_CONFIG, cni_conflist(pod_subnet).encode())
    put(root, UNIT, unit(node).encode())
    enable(root, UNIT)


def enable(root: Path, unit_path: str) -> None:
    """Enable a unit the way ``systemctl enable`` would for WantedBy=multi-user.target."""
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / Path(unit_path).name
    link.unlink(missing_ok=True)
    link.symlink_to(unit_path)


def put(root: Path, path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to the host path ``path`` under the host root ``root`` (not booted)."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(mode)
