"""The pure core imports nothing of pyinfra, paramiko, gevent or pynvml (issue #9 item 4).

Each module is imported in a fresh interpreter, so what another test imported cannot hide a
dependency, and what the module pulls in transitively counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CORE = [
    "gpuprov.catalog",
    "gpuprov.checks.gpus",
    "gpuprov.checks.kubelet_devices",
    "gpuprov.compare",
    "gpuprov.contract",
    "gpuprov.core",
    "gpuprov.core.advise.bounds",
    "gpuprov.core.advise.demand",
    "gpuprov.core.advise.formats",
    "gpuprov.core.advise.inventory_text",
    "gpuprov.core.advise.packing",
    "gpuprov.core.advise.proposal",
    "gpuprov.core.advise.read_nvidia_smi",
    "gpuprov.core.advise.read_prometheus",
    "gpuprov.core.advise.read_range_csv",
    "gpuprov.core.advise.read_range_json",
    "gpuprov.core.advise.reading",
    "gpuprov.core.advise.replay",
    "gpuprov.core.advise.report",
    "gpuprov.core.advise.series",
    "gpuprov.core.advise.sketch",
    "gpuprov.core.advise.usage",
    "gpuprov.errors",
    "gpuprov.findings",
    "gpuprov.gpu_clients",
    "gpuprov.hostfiles.apt_preferences",
    "gpuprov.hostfiles.apt_source",
    "gpuprov.hostfiles.containerd",
    "gpuprov.hostfiles.device_plugin",
    "gpuprov.hostfiles.docker",
    "gpuprov.hostfiles.kubelet",
    "gpuprov.hostfiles.mig_layout",
    "gpuprov.hostfiles.mig_unit",
    "gpuprov.hostfiles.nouveau_blacklist",
    "gpuprov.inventory_data",
    "gpuprov.kube.manifests",
    "gpuprov.kube.verify",
    "gpuprov.kube.vgpu",
    "gpuprov.kubelet_checkpoint",
    "gpuprov.limits",
    "gpuprov.mig.diff",
    "gpuprov.mig.partedconfig",
    "gpuprov.mig.solver",
    "gpuprov.packaging.resolve",
    "gpuprov.plan",
    "gpuprov.probe_document",
    "gpuprov.variables",
    "gpuprov.vgpu",
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


def test_the_inventory_edge_does_load_pyinfra():
    # The check above can fail: the module that reads pyinfra inventories does load it.
    assert "pyinfra" in loaded_after_import("gpuprov.inventory")
