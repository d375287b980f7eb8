# Applies to every host; group files override these.
driver_version = "550.127.05"
container_runtime = "containerd"
kubelet_config_dir = "/etc/kubernetes/kubelet.conf.d"
