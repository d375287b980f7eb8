"""One node brought to its plan from inside the cluster: what the Job of a ``kube render
--fleet`` Plan runs (``gpuprov fleet apply``, docs/fleet.md).

The node's plan comes as data, its plan document in the pool's ConfigMap (read back and checked
by ``gpuprov.core.plan_document``); the deploy is the SSH deploy's own ``gpu_node``, run by
pyinfra's ``@chroot`` connector against the host root the controller mounts at ``/host``: every
command is ``chroot /host sh -c ...``, so it runs the host's own binaries (apt, systemctl, the
host's python3 for the agent) on the host's files. systemd is reached as over SSH: the Job's pod
shares the host's PID namespace (the controller sets ``hostPID``), so inside the chroot
``/proc/1/root`` is the same directory as ``/`` and systemctl does not take itself to be in a
chroot (systemd's ``running_in_chroot``), and it talks to PID 1 over the host's
``/run/systemd/private`` socket (the hostPath mount of ``/`` is recursive, so ``/host/run`` is
the host's ``/run``). The result goes on the Node as two annotations, the plan version and
``applied`` or ``failed``.

>>> sorted(result_annotations("plan-1", True).values())
['applied', 'plan-1']
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from gpuprov.core.cluster.fleet import FILES_KEY
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.plan import HostPlan
from gpuprov.core.plan_document import read
from gpuprov.host.contract import (
    FLEET_APPLIED,
    FLEET_FAILED,
    FLEET_PLAN_ANNOTATION,
    FLEET_RESULT_ANNOTATION,
)


def result_annotations(version: str, ok: bool) -> dict[str, str]:
    """What the Job writes on its Node when it ends."""
    return {
        FLEET_PLAN_ANNOTATION: version,
        FLEET_RESULT_ANNOTATION: FLEET_APPLIED if ok else FLEET_FAILED,
    }


def host_plan(
    data: dict[str, str], node: str, where: str, kubeconfig: str | None = None
) -> HostPlan:
    """The plan of ``node`` from its pool's ConfigMap ``data``; InputError when it is missing
    or wrong. The document's ``kubeconfig`` is the controller's file, not in the pod: it is
    replaced by ``kubeconfig``, the Job's own (its service account, ``fleet apply`` writes it
    when the image has kubectl), with which the deploy drains as over SSH; None: no drain (a
    disruptive change warns), the controller cordoned the node."""
    key = f"{node}.json"
    if key not in data:
        raise InputError([Problem(where, f"no plan document for node {node}", key=key)])
    try:
        document = json.loads(data[key])
    except ValueError as e:
        raise InputError([Problem(where, f"not JSON: {e}", key=key)]) from None
    (plan,) = read(document, f"{where} {key}").hosts
    return dataclasses.replace(plan, node=dataclasses.replace(plan.node, kubeconfig=kubeconfig))


def install_files(data: dict[str, str], binary: dict[str, bytes], where: str) -> list[str]:
    """Put the controller's files the deploy reads (repository keys, shipped in the ConfigMap
    by ``kube render --fleet``) back at their paths in this container; the paths written."""
    try:
        names = json.loads(data.get(FILES_KEY, "{}"))
        for path, key in names.items():
            target = Path(path).expanduser()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(binary[key])
    except (ValueError, KeyError, AttributeError, OSError) as e:
        raise InputError(
            [Problem(where, f"its files cannot be written: {e}", key=FILES_KEY)]
        ) from None
    return sorted(names)


def deploy(plan: HostPlan, host_root: str) -> bool:
    """Run the deploy of ``plan`` against the host root ``host_root``; True when it succeeded."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all, disconnect_all
    from pyinfra.api.deploy import add_deploy
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra.api.operations import run_ops
    from pyinfra_cli.log import setup_logging

    from gpuprov.controller.deploys.gpu_node import gpu_node

    # The Job's log is the deploy's, as the pyinfra CLI prints it over SSH: each step, and the
    # drain's evictions (info), not only warnings.
    setup_logging(logging.INFO)
    name = f"@chroot/{host_root.strip('/')}"
    state = State(inventory=Inventory(([name], {})), config=Config())
    try:
        # One host: its failure is pyinfra's "No hosts remaining!", here as in connect_all.
        connect_all(state)
        add_deploy(state, gpu_node, plan, _timeout=plan.timeouts.gpuprov_timeout_step)
        run_ops(state)
    except PyinfraError as e:
        print(f"error: {e}", flush=True)
        return False
    finally:
        disconnect_all(state)
    return not state.failed_hosts
