"""NVML initialisations (and NVML calls) per probe and per MIG apply, on the simulated driver.

    python bench/nvml_inits.py          # prints one JSON object

The probe and the applier are gpuprov's real host-side code (``gpuprov.host.agent.probe``,
``gpuprov.host.agent``) on nvidia-ml-py's own wrappers and loader; only the library below pynvml
is the simulated driver's ``libnvidia-ml.so.1``, which logs each C function called
(``GPUPROV_NVML_SIM_TRACE``). The host is the lab's MIG
host (8 x H100-80GB) and the layout the lab's (3g, 2g, two 1g on every GPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from gpuprov_lab.sim.contract import SIM_ENV, SIM_TRACE_ENV
from gpuprov_lab.sim.libnvml import admin, preload

from gpuprov.core.catalog import find_model
from gpuprov.core.mig.solver import solve
from gpuprov.host.agent.main import main as agent
from gpuprov.host.contract import MIG_LAYOUT_SCHEMA

MODEL, COUNT = "H100-80GB", 8
LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def _run(argv: list[str], trace: Path) -> dict[str, int]:
    """One agent run; the NVML calls it made (the library's trace of this run)."""
    trace.write_text("")
    with contextlib.redirect_stdout(io.StringIO()):
        agent(argv)
    calls = Counter(line.split()[0] for line in trace.read_text().splitlines())
    return {"nvml_inits": calls["nvmlInitWithFlags"], "nvml_calls": sum(calls.values())}


def measure() -> dict[str, dict[str, int]]:
    preload.preload()  # pynvml's own CDLL("libnvidia-ml.so.1") is the simulated library
    with tempfile.TemporaryDirectory() as tmp:
        state_path = Path(tmp) / "gpus.json"
        # MIG mode on, as after the deploy's first apply and a boot
        admin.create(str(state_path), MODEL, COUNT, seed="bench", mig=range(COUNT))
        instances = [i.as_dict() for i in solve(find_model(MODEL), LAYOUT).instances]
        layout = Path(tmp) / "mig-layout.json"
        layout.write_text(
            json.dumps(
                {
                    "schema": MIG_LAYOUT_SCHEMA,
                    "gpus": [
                        {"index": i, "mig_enabled": True, "instances": instances}
                        for i in range(COUNT)
                    ],
                }
            )
        )
        os.environ[SIM_ENV] = str(state_path)
        trace = Path(tmp) / "nvml.trace"
        os.environ[SIM_TRACE_ENV] = str(trace)
        return {
            "probe": _run(["probe"], trace),
            "apply (creates 32 instances)": _run(["apply", "--layout", str(layout)], trace),
            "apply (already as planned)": _run(["apply", "--layout", str(layout)], trace),
        }


if __name__ == "__main__":
    print(json.dumps(measure()))
