"""The lab's queue system: Kueue or Volcano (`gpuprov lab up --queues kueue|volcano`) against
the lab's own API server, its webhooks served on the bridge address the API server calls.

One at a time: the two both admit pods and jobs, and a lab runs the one whose objects are under
test. Each runs from a work directory of its own under ``<run dir>/queues/``
(``consumer.Consumer``: pid files, logs, the webhook configurations to delete), so that
``stop`` needs the run directory only, and ``lab down`` ends whatever an earlier command
started. ``start`` installs the system's CRDs and webhook configurations and returns once it
answers (Kueue's ``/readyz``, Volcano's ``default`` Queue ``Open``; ``kueue.py``,
``volcano.py``). Volcano's scheduler reads ``volcano.scheduler_conf()`` (the ``capacity``
plugin, gpuprov's default ``kube_queues_volcano_plugin``).

>>> from pathlib import Path
>>> workdir(Path("/tmp/gpuprov-lab"), "kueue")
PosixPath('/tmp/gpuprov-lab/queues/kueue')
>>> status(Path("/nonexistent"), None) is None
True
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from gpuprov_lab import consumer, kueue, procs, volcano

SYSTEMS = ("kueue", "volcano")
_MODULES = {"kueue": kueue, "volcano": volcano}


def workdir(run_path: Path, system: str) -> Path:
    return run_path / "queues" / system


def start(run_path: Path, system: str, kubeconfig: Path, address: str) -> dict[str, Any]:
    """Start ``system`` (one of ``SYSTEMS``) against the API server of ``kubeconfig``, its
    webhooks on ``address``; what ``lab.json`` records of it."""
    directory = workdir(run_path, system)
    handle = _MODULES[system].start(kubeconfig, address, directory)
    return {
        "system": system,
        "dir": str(directory),
        "endpoints": [f"{a}:{p}" for a, p in handle.endpoints],
    }


def stop(run_path: Path) -> None:
    """End every queue system started under ``run_path`` (its webhook configurations deleted
    first) and remove its work directory; fine when none runs."""
    for directory in sorted((run_path / "queues").glob("*")):
        consumer.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(run_path / "queues", ignore_errors=True)


def status(run_path: Path, recorded: dict[str, Any] | None) -> dict[str, Any] | None:
    """``recorded`` (``start``'s document) with each process and whether it runs; None when
    the lab runs no queue system."""
    if not recorded:
        return None
    pidfiles = sorted(Path(recorded["dir"]).glob("*.pid"))  # consumer.Consumer's
    processes = [{"name": p.stem, "running": procs.alive(p)} for p in pidfiles]
    return {
        **recorded,
        "processes": processes,
        "running": bool(processes) and all(p["running"] for p in processes),
    }
