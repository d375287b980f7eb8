gpu_model = "L40S"
gpu_count = 4
time_slicing_replicas = 4
kubelet_max_pods = "auto"
