"""The lab: throwaway hosts with simulated GPUs on this machine (`sudo gpuprov lab up`).

    sudo gpuprov lab up
    pyinfra -y inventories/lab.py deploys/gpu_node.py
    gpuprov verify inventories/lab.py
    sudo gpuprov lab down

The hosts are read from the running lab (`gpuprov lab up --hosts 8` or `--spec FILE` included),
each with its address and simulated GPUs as host data; with no lab up, the default three hosts.
Settings common to every lab host (SSH, the lab's apt repositories, versions) are in
group_data/lab.py, the group pyinfra names after this file.
"""

from gpuprov_lab.inventory import hosts

# Time-sliced: each GPU advertised 4 times as nvidia.com/gpu.shared.
shared = (hosts("shared"), {"time_slicing_replicas": 4})

# MIG, mig-parted's "all-balanced" shape on every GPU (2g@0, 1g@2, 1g@3, 3g@4). A MIG host of
# another model gets the same shape in its own profile names.
mig = (
    hosts("mig"),
    {"mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, "mig_strategy": "mixed"},
)

# Whole cards.
whole_card = (hosts("whole_card"), {})
