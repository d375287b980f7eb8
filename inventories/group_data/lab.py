# Every host of inventories/lab.py (pyinfra's group named after the inventory file).
# Paths follow the lab's run directory (/tmp/gpuprov-lab, or $GPUPROV_LAB_DIR).
from gpuprov_lab import images as lab_images
from gpuprov_lab import inventory as lab
from gpuprov_lab.services import repo_url

# SSH as root with the key of the running lab; host keys are checked strictly against the
# known_hosts the lab writes for the hosts it makes (so nothing is "added" or warned about).
ssh_user = "root"
ssh_key = lab.ssh_key()
ssh_strict_host_key_checking = "yes"
ssh_known_hosts_file = lab.known_hosts()

# The lab's signed repositories serve the driver as Debian's non-free does: bookworm-backports'
# 535.216.03-2~bpo12+1 and bookworm's newer 535.261.03-1 (the upgrade to test), and the toolkit
# at 1.17.8-1 and 1.18.0-1. The lab hosts are Debian: driver_source defaults to debian-nonfree.
driver_version = "535.216.03"
driver_repo_url = repo_url("non-free")
driver_repo_key = lab.repo_key()
container_runtime = "containerd"
container_toolkit_version = "1.17.8-1"
container_toolkit_repo_url = repo_url("libnvidia-container")
container_toolkit_repo_key = lab.repo_key()

# The lab's kubelet (the real one) runs with --config-dir; NVIDIA's device plugin is a systemd
# service whose reload sends it SIGHUP (lab/gpuprov_lab/plugin_service.py).
kubelet_config_dir = "/etc/kubernetes/kubelet.conf.d"
device_plugin_reload_command = "systemctl reload nvidia-device-plugin.service"

# The lab's API server (admin kubeconfig): the deploy cordons and drains a node around a
# disruptive change (a driver or MIG mode change) and uncordons it after. None with
# `gpuprov lab up --no-kube` or no lab up. kubectl must be on PATH (`lab up` prints how).
kubeconfig = lab.kubeconfig()

# What the kubelet registered from the device plugin is checked on each host by `gpuprov verify`;
# with `gpuprov lab up --no-kube` no kubelet runs, so there is nothing to check.
verify_kubelet_devices = lab.kubeconfig() is not None

# Two teams share the lab's pools through one Kueue cohort (or Volcano's capacity plugin): the
# queue tests' team-a and team-b (docs/kubernetes.md#queues).
kube_queues = {
    "team-a": {"quota": {"shared": 0.5, "whole_card": 0.5}, "cohort": "gpus"},
    "team-b": {"quota": {"shared": 0.5, "mig": 1.0, "whole_card": 0.5}, "cohort": "gpus"},
}

# `gpuprov verify --canary`: no registry is reachable from the lab, so its canary pods run the
# lab's own image (Debian's static busybox, imported into each host's containerd by `lab up`;
# gpuprov_lab/images.py). A lab pod starts in seconds (docs/performance.md).
canary_image = lab_images.CANARY
canary_timeout = 90
