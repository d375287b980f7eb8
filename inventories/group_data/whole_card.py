gpu_model = "H200-141GB"
gpu_count = 4
