# Every host of inventories/example.py (pyinfra's group named after the inventory file).
# Mode-specific keys belong to the mode groups, not here.
driver_version = "535.261.03"
container_runtime = "containerd"
container_toolkit_version = "1.17.8-1"
kubelet_config_dir = "/etc/kubernetes/kubelet.conf.d"
