"""Bring every GPU host of the inventory to its plan.

    pyinfra -y INVENTORY deploys/gpu_node.py          # --dry --diff shows every change first

The plan is built once for the whole inventory (an impossible plan exits 2 before any host is
touched); each host in a mode group (shared, mig, whole_card, vgpu) then gets its HostPlan applied.
Hosts in no mode group are left alone. Every remote step runs under a time limit (the host's
``gpuprov_timeout_step`` unless the step has a limit of its own) and the SSH connection under
keepalives, so a stuck step or a vanished host fails that host, named, and the rest go on.
"""

from pyinfra import host, state

from gpuprov.controller import keepalive
from gpuprov.controller.deploys import progress
from gpuprov.controller.deploys.gpu_node import gpu_node
from gpuprov.controller.deploys.inventory_plan import cluster_plan

_plan = cluster_plan(state)
progress.watch(state)
if host.name in {h.name for h in _plan.hosts}:
    _timeouts = _plan.host(host.name).timeouts
    keepalive.watch(state, host, _timeouts.gpuprov_ssh_dead_after)
    gpu_node(_plan.host(host.name), _timeout=_timeouts.gpuprov_timeout_step)
