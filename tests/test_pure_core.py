"""The pure core imports nothing of pyinfra, paramiko, gevent or pynvml (issue #9 item 4).

Each module is imported in a fresh interpreter, so what another test imported cannot hide a
dependency, and what the module pulls in transitively counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Every module of the core, and the host side's modules that need no NVML (the controller
# imports them too: the contract, the MIG diff, the kubelet's checkpoint, the GPU clients).
CORE = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in (ROOT / "gpuprov" / "core").rglob("*.py")
    if "__pycache__" not in p.parts
) + [
    "gpuprov.host.contract",
    "gpuprov.host.gpu_clients",
    "gpuprov.host.kubelet.checkpoint",
    "gpuprov.host.mig.diff",
    "gpuprov.host.mig.layout",
]
EDGE_ONLY = ["pyinfra", "paramiko", "gevent", "pynvml"]


def loaded_after_import(module: str) -> list[str]:
    code = (
        f"import json, sys, {module}; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", CORE)
def test_core_module_loads_no_edge_library(module):
    loaded = loaded_after_import(module)
    assert [m for m in EDGE_ONLY if m in loaded] == []


def test_a_facts_edge_does_load_pyinfra():
    # The check above can fail: a module that defines pyinfra facts does load it. (The
    # inventory edge no longer does: it loads pyinfra only when something connects.)
    assert "pyinfra" in loaded_after_import("gpuprov.controller.facts.probe")
