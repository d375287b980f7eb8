"""The probe's ``containerd`` section of a node that matches its plan (nvidia the default
runtime), for checks that are not about containerd: what Debian's containerd 1.6 printed for a
kubeadm main file plus the drop-in gpuprov renders for it, cut to the CRI runtimes.
tests/test_containerd_check.py reads the same from the running binaries."""

from __future__ import annotations

MATCHING = {
    "version": {
        "ok": True,
        "text": "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3",
    },
    "dump": {
        "ok": True,
        "text": """\
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "nvidia"
    snapshotter = "native"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = true
""",
    },
    "plugins": {
        "ok": True,
        "text": "TYPE                  ID    PLATFORMS      STATUS\n"
        "io.containerd.grpc.v1 cri   linux/amd64    ok",
    },
}
