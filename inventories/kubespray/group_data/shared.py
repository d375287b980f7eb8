gpu_model = "L40S"
gpu_count = 4
time_slicing_replicas = 4
# gpuprov's own key: Kubespray's kubelet_max_pods takes a number only.
gpuprov_kubelet_max_pods = "auto"
