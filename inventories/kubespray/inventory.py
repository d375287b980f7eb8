# A cluster that Kubespray installs and gpuprov provisions, sharing one inventory.
# Kubespray's groups (kube_control_plane, etcd, kube_node, k8s_cluster) and its group variables
# (group_data/all.py, group_data/k8s_cluster.py, as in its sample group_vars) sit next to
# gpuprov's mode groups; gpuprov ignores the keys that are not its own (`gpuprov plan --strict`
# lists them).
#
#   gpuprov plan inventories/kubespray/inventory.py

kube_control_plane = ["cp-01"]
etcd = ["cp-01"]
kube_node = ["gpu-h100-01", "gpu-h100-02", "gpu-l40s-01"]
k8s_cluster = ["cp-01", "gpu-h100-01", "gpu-h100-02", "gpu-l40s-01"]

mig = ["gpu-h100-01", "gpu-h100-02"]
shared = ["gpu-l40s-01"]
