gpu_model = "H100-80GB"
gpu_count = 8
mig_layout = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
