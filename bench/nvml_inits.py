"""NVML initialisations (and NVML calls) per probe and per MIG apply, on the simulated driver.

    python bench/nvml_inits.py          # prints one JSON object

The probe and the applier are gpuprov's real host-side code (``gpuprov.host.agent.probe``,
``gpuprov.host.agent``) on nvidia-ml-py's own wrappers; only the library below pynvml is the
simulation (``gpuprov_lab.sim``), which counts each C function called. The host is the lab's MIG
host (8 x H100-80GB) and the layout the lab's (3g, 2g, two 1g on every GPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import gpuprov_lab.sim
from gpuprov_lab.sim import state as sim_state

from gpuprov.core.catalog import find_model
from gpuprov.core.mig.solver import solve
from gpuprov.host.agent.main import main as agent
from gpuprov.host.contract import MIG_LAYOUT_SCHEMA, SIM_ENV

MODEL, COUNT = "H100-80GB", 8
LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def _run(argv: list[str], libraries: list) -> dict[str, int]:
    """One agent run; the NVML calls it made (every library it installed, summed)."""
    before = len(libraries)
    with contextlib.redirect_stdout(io.StringIO()):
        agent(argv)
    calls: dict[str, int] = {}
    for library in libraries[before:]:
        for name, count in library.calls.items():
            calls[name] = calls.get(name, 0) + count
    return {"nvml_inits": calls.get("nvmlInitWithFlags", 0), "nvml_calls": sum(calls.values())}


def measure() -> dict[str, dict[str, int]]:
    libraries: list = []
    install = gpuprov_lab.sim.install

    def counting_install(path: str):
        library = install(path)
        libraries.append(library)
        return library

    gpuprov_lab.sim.install = counting_install
    with tempfile.TemporaryDirectory() as tmp:
        state_path = Path(tmp) / "gpus.json"
        host = sim_state.new_state(MODEL, COUNT, seed="bench")
        for gpu in host["gpus"]:  # MIG mode on, as after the deploy's first apply and a boot
            gpu["mig_current"] = gpu["mig_pending"] = True
        sim_state.write_new(str(state_path), host)
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
        return {
            "probe": _run(["probe"], libraries),
            "apply (creates 32 instances)": _run(["apply", "--layout", str(layout)], libraries),
            "apply (already as planned)": _run(["apply", "--layout", str(layout)], libraries),
        }


if __name__ == "__main__":
    print(json.dumps(measure()))
