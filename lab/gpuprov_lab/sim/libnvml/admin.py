"""The simulated hardware's switches from Python: the built ``gpuprov-sim`` program, a thin
program over the library's gpuprovSim* API (``gpuprov_sim.h``), as a lab host's root runs it.

``create`` is how the lab and the benches make a host's GPUs: the library alone decides their
UUIDs, bus ids and initial state.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "gpus.json")
>>> create(path, "A100-80GB", 2, seed="lab-1", mig=[1])
>>> import json; [g["mig_current"] for g in json.load(open(path))["gpus"]]
[False, True]
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

from gpuprov_lab.sim.libnvml import build


class AdminError(Exception):
    """``gpuprov-sim`` refused; the message is its one line."""


def run(*args: str) -> str:
    """``gpuprov-sim ARGS``'s output; AdminError with its one-line message when it refuses."""
    result = subprocess.run(
        [str(build.build().programs["gpuprov-sim"]), *args], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise AdminError(f"gpuprov-sim {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def create(
    path: str,
    model: str,
    count: int,
    seed: str,
    mig: Iterable[int] = (),
    driver_version: str | None = None,
) -> None:
    """A freshly booted host in state file ``path``: ``count`` GPUs of catalog ``model``, MIG on
    for the GPUs in ``mig``, no instances; UUIDs and bus ids depend only on ``seed`` and the
    index."""
    args = ["--state", path, "init", "--model", model, "--count", str(count), "--seed", seed]
    for index in mig:
        args += ["--mig", str(index)]
    if driver_version is not None:
        args += ["--driver-version", driver_version]
    run(*args)
