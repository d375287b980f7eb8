"""MIG: make the GPUs match a mig-layout document through the host agent, incrementally."""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.api.operation import OperationMeta

from gpuprov.controller.facts.probe import AgentProbe
from gpuprov.controller.operations.refuse import refuse
from gpuprov.host.contract import AGENT_EXIT_REBOOT, AGENT_PATH, AGENT_REBOOT_MARK, MIG_LAYOUT_PATH
from gpuprov.host.mig.diff import MigActions, MigDiffError, diff


def differences(document: Mapping[str, Any], node: Mapping[str, Any]) -> list[MigActions] | None:
    """The GPUs whose MIG state differs from ``document``; None when the node state cannot tell
    (agent missing, NVML failing, a planned GPU not seen)."""
    if node.get("nvml") != "ok":
        return None
    observed = {gpu["index"]: gpu for gpu in node.get("gpus", [])}
    out = []
    for planned in document["gpus"]:
        gpu = observed.get(planned["index"])
        if gpu is None:
            return None
        try:
            actions = diff(planned, gpu)
        except MigDiffError:
            return None
        if actions.changes:
            out.append(actions)
    return out


def disruptive(actions: Sequence[MigActions]) -> bool:
    """A mode change resets the GPU; destroying an instance takes it from whoever uses it."""
    return any(a.mig_mode is not None or a.reset or a.destroy for a in actions)


def reboot_requested(meta: OperationMeta) -> bool:
    """Whether an ``applied`` operation ended with the agent asking for a reboot."""
    return meta.did_succeed() and AGENT_REBOOT_MARK in (meta.stdout or "")


@operation()
def applied(
    document: dict[str, Any],
    layout_path: str = MIG_LAYOUT_PATH,
    agent_path: str = AGENT_PATH,
    python: str = "python3",
    upload: bool = False,
):
    """
    Ensure every GPU matches the MIG layout ``document`` (schema ``gpuprov.mig-layout/v1``).

    Reads the GPUs through the agent's probe and runs ``agent.pyz apply`` only when some GPU
    differs; the agent then touches only the GPUs (and instances) that differ. When the agent
    says a reboot is needed (exit 3), the operation succeeds and prints ``AGENT_REBOOT_MARK``; follow
    it with a reboot ``_if=lambda: reboot_requested(op)``.

    + document: the layout (one entry per GPU: ``index``, ``mig_enabled``, ``instances``)
    + layout_path: where the layout file is on the host
    + agent_path: the host agent (``gpuprov_agent_path``)
    + python: the interpreter that runs it (``gpuprov_python``)
    + upload: write ``document`` to ``layout_path`` first and remove it after (a one-off
      layout, e.g. MIG off on a host that keeps no layout file)

    **Example:**

    .. code:: python

        applied(document={"schema": MIG_LAYOUT_SCHEMA, "gpus": [
            {"index": 0, "mig_enabled": False, "instances": []}]},
            layout_path=MIG_OFF_PATH, upload=True)
    """
    node = host.get_fact(AgentProbe, agent_path=agent_path, python=python)
    if node.get("nvml") not in ("ok", "agent-missing"):
        if any(g["mig_enabled"] for g in document["gpus"]):
            yield refuse(
                f"cannot apply the MIG layout: NVML says {node.get('nvml')} "
                f"({node.get('error')}); is the driver loaded (reboot pending)?"
            )
        else:
            host.noop(f"no driver loaded (NVML: {node.get('nvml')}), so no MIG mode to turn off")
        return
    pending = differences(document, node)
    if pending == []:
        host.noop(f"MIG already as planned on {len(document['gpus'])} GPUs")
        return
    if upload:
        yield StringCommand("mkdir", "-p", shlex.quote(layout_path.rsplit("/", 1)[0]))
        yield FileUploadCommand(
            _text(document), layout_path, remote_temp_filename=host.get_temp_filename(layout_path)
        )
    p, a, lp = (shlex.quote(x) for x in (python, agent_path, layout_path))
    # Exit 3 is not a failure here: the reboot that follows is a separate, visible operation.
    yield StringCommand(
        f"{p} {a} apply --layout {lp}; rc=$?; "
        + (f"rm -f {lp}; " if upload else "")
        + f"if [ $rc -eq {AGENT_EXIT_REBOOT} ]; then echo {shlex.quote(AGENT_REBOOT_MARK)}; "
        "exit 0; fi; exit $rc"
    )


def _text(document: dict[str, Any]) -> io.StringIO:
    return io.StringIO(json.dumps(document, indent=2) + "\n")
