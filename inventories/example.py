"""A small GPU cluster: time-sliced A100s, MIG-partitioned H100s, whole-card H200s.

    gpuprov plan inventories/example.py
    pyinfra -y inventories/example.py deploys/gpu_node.py     # against real hosts

Module-level lists are pyinfra groups; `shared`, `mig` and `whole_card` decide each host's mode.
Each mode group carries its group data inline as `(hosts, data)`; settings common to every host
of this inventory are in group_data/example.py (the group pyinfra names after this file). Host
data, the second item of a host tuple, overrides group data.
"""

# Time-sliced inference nodes: each A100 is advertised 4 times as nvidia.com/gpu.shared.
shared = (
    ["gpu-a100-01", "gpu-a100-02"],
    {"gpu_model": "A100-80GB", "gpu_count": 8, "time_slicing_replicas": 4},
)

# MIG nodes with mig-parted's "all-balanced" shape (2g@0, 1g@2, 1g@3, 3g@4); gpu-h100-02 keeps
# GPU 7 as one 7g.80gb instance for a big job.
mig = (
    [
        "gpu-h100-01",
        ("gpu-h100-02", {"mig_layout_by_gpu": {7: {"7g.80gb": 1}}}),
    ],
    {
        "gpu_model": "H100-80GB",
        "gpu_count": 8,
        "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
        "mig_strategy": "mixed",
    },
)

# Training nodes: whole cards.
whole_card = (["gpu-h200-01"], {"gpu_model": "H200-141GB", "gpu_count": 4})
