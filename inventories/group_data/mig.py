gpu_model = "H100-80GB"
gpu_count = 8
# mig-parted's "all-balanced" shape: 2g@0, 1g@2, 1g@3, 3g@4.
mig_layout = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
mig_strategy = "mixed"
