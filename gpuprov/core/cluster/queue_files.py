"""The files of ``gpuprov kube render --queues kueue|volcano``: the teams' queue objects for
one scheduler, from the queue plan (gpuprov.core.cluster.queues); and, at plan time, which
scheduler's rules the teams break (``scheduler_refusals``).

>>> sorted(queue_files(inventory, cluster, "volcano"))            # doctest: +SKIP
['volcano-queues.yaml', 'volcano-scheduler-configmap.yaml']
"""

from __future__ import annotations

from typing import Any

from gpuprov.core.cluster import kueue, volcano_queues
from gpuprov.core.cluster.queues import QueuePlan, plan_queues
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.inventory_data import InventoryData
from gpuprov.core.plan import ClusterPlan

QUEUE_SCHEDULERS = ("kueue", "volcano")


def queue_files(
    inventory: InventoryData, cluster: ClusterPlan, scheduler: str
) -> dict[str, tuple[str, list[Any]]]:
    """File name -> (comment header, YAML documents) for ``scheduler``; InputError when the
    inventory declares no team or a queue breaks the scheduler's rules."""
    plan = plan_queues(inventory, cluster)
    if plan is None:
        raise InputError(
            [
                Problem(
                    inventory.path,
                    f"--queues {scheduler} needs teams, and kube_queues declares none "
                    "(docs/kubernetes.md#queues)",
                    key="kube_queues",
                )
            ]
        )
    if scheduler == "kueue":
        return {
            "kueue-queues.yaml": (
                f"Kueue ({kueue.API_VERSION}): one ResourceFlavor per pool, one ClusterQueue "
                "per team, one LocalQueue\nper team namespace, from kube_queues in "
                f"{plan.source}. Label a Job kueue.x-k8s.io/queue-name=TEAM.",
                kueue.render(plan),
            )
        }
    return {
        "volcano-queues.yaml": (
            f"Volcano ({volcano_queues.API_VERSION}) Queues, one per team, from kube_queues in "
            f"{plan.source};\nthey assume volcano-scheduler-configmap.yaml's "
            f"{plan.volcano_plugin} plugin.",
            volcano_queues.render(plan),
        ),
        "volcano-scheduler-configmap.yaml": (
            f"volcano-scheduler's configuration with the {plan.volcano_plugin} queue plugin "
            "(capacity and proportion\ncannot run together); the scheduler reads it with "
            "--scheduler-conf and reloads it on change.",
            [volcano_queues.scheduler_config_map(plan, volcano_queues.uses_vgpu(plan))],
        ),
    }


def scheduler_refusals(plan: QueuePlan) -> tuple[list[Problem], list[str]]:
    """What ``kube render --queues`` would refuse, known at plan time: (problems, warnings).

    The inventory does not say which scheduler counts the teams, so each one they could be meant
    for is tried: Volcano always, Kueue when no team has a parent (nested teams are Volcano's).
    When none of them can take the teams, every refusal is a problem (exit 2 before any host is
    touched); when one can, the others' refusals are warnings naming the scheduler.
    """
    candidates = [("volcano", volcano_queues.render)]
    if not any(q.parent for q in plan.queues):
        candidates.insert(0, ("kueue", kueue.render))
    refused: dict[str, list[Problem]] = {}
    for scheduler, render in candidates:
        try:
            render(plan)
        except InputError as e:
            refused[scheduler] = e.problems
    if len(refused) == len(candidates):
        return [p for problems in refused.values() for p in problems], []
    warnings = [
        f"kube render --queues {scheduler} would refuse: {problem}"
        for scheduler, problems in refused.items()
        for problem in problems
    ]
    return [], warnings
