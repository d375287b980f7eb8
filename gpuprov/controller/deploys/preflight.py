"""Pre-flight: before anything changes, the host's GPUs must be the ones the plan is for."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from gpuprov.controller.facts.hardware import Hardware
from gpuprov.controller.operations import preflight as checks
from gpuprov.core.plan import HostPlan


@deploy("Pre-flight")
def preflight(plan: HostPlan, hardware: Hardware) -> bool:
    """Whether ``hardware`` (read with the host's snapshot) matches the plan; if not, the host
    fails (only it) at the first operation, with nothing changed."""
    problem = checks.mismatch(hardware, plan.gpu_model, plan.gpu_count)
    if problem is None:
        return True
    logger.error(f"{host.print_prefix}pre-flight: {problem}; this host will not be changed")
    checks.gpus(name="GPUs match the plan", model=plan.gpu_model, count=plan.gpu_count)
    return False
