gpu_model = "A100-80GB"
gpu_count = 8
time_slicing_replicas = 4
