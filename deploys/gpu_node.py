"""Bring every GPU host of the inventory to its plan.

    pyinfra -y INVENTORY deploys/gpu_node.py          # --dry --diff shows every change first

The plan is built once for the whole inventory (an impossible plan exits 2 before any host is
touched); each host in a mode group (shared, mig, whole_card) then gets its HostPlan applied.
Hosts in no mode group are left alone.
"""

from pyinfra import host, state

from gpuprov.deploys.cluster import cluster_plan
from gpuprov.deploys.gpu_node import gpu_node

_plan = cluster_plan(state)
if host.name in {h.name for h in _plan.hosts}:
    gpu_node(_plan.host(host.name))
