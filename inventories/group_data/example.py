# Every host of inventories/example.py (pyinfra's group named after the inventory file).
# Mode-specific keys belong to the mode groups, not here.
driver_version = "535.261.03"
container_runtime = "containerd"
container_toolkit_version = "1.17.8-1"
kubelet_config_dir = "/etc/kubernetes/kubelet.conf.d"

# Two teams share every pool through one Kueue cohort (or Volcano's capacity plugin): each has
# half of it as its quota and may borrow what the other leaves idle; team-b lends at most half of
# its MIG instances (docs/kubernetes.md#queues). `gpuprov kube render --queues kueue|volcano`.
kube_queues = {
    "team-a": {"quota": {"shared": 0.5, "whole_card": 0.5}, "cohort": "gpus"},
    "team-b": {
        "quota": {"shared": 0.5, "mig": 1.0, "whole_card": 0.5},
        "cohort": "gpus",
        "lending_limit": {"mig": 0.5},
    },
}
