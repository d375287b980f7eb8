"""A small GPU cluster: time-sliced A100s, MIG-partitioned H100s, whole-card H200s.

    gpuprov plan inventories/example.py
    pyinfra -y inventories/example.py deploys/gpu_node.py     # against real hosts

Module-level lists are pyinfra groups; shared/mig/whole_card decide each host's mode.
"""

# Time-sliced inference nodes: each A100 is advertised 4 times as nvidia.com/gpu.shared.
shared = ["gpu-a100-01", "gpu-a100-02"]

# MIG nodes. gpu-h100-02 keeps GPU 7 whole-ish for one big job (host data overrides group data).
mig = [
    "gpu-h100-01",
    ("gpu-h100-02", {"mig_layout_by_gpu": {7: {"7g.80gb": 1}}}),
]

# Training nodes: whole cards.
whole_card = ["gpu-h200-01"]
