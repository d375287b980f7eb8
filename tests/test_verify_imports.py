"""Verify loads only what it uses (issue #26 item 5): the controller does not import the TOML
writer (only the deploy renders TOML) or the cluster check without ``--kubeconfig``, and the
probe on each host imports the HTTP/2 stack only when asked for the kubelet's pod-resources
(``verify --canary``). Each runs in a new interpreter and reports the modules it loaded; the
times are in bench/run.py and docs/performance.md, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Runs a module as `python -m MODULE ARGS...` would, then prints the modules it imported.
RUN = """
import json, runpy, sys
module, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = module
code = 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
print("loaded:" + json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def run(module: str, *args: str) -> tuple[int, set[str], str]:
    result = subprocess.run(
        [sys.executable, "-c", RUN, module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    [line] = [line for line in result.stderr.splitlines() if line.startswith("loaded:")]
    return result.returncode, set(json.loads(line.removeprefix("loaded:"))), result.stdout


def test_verify_without_kubeconfig_imports_no_toml_writer_and_no_cluster_check(tmp_path):
    code, modules, out = run(
        "gpuprov", "verify", "inventories/example.py", "--snapshot-dir", str(tmp_path)
    )
    # Every host compared (and unreachable: no snapshots), so the whole comparison was loaded.
    assert code == 1 and "5 unreachable" in out, out
    assert "gpuprov.core.checks.host" in modules and "pyinfra" in modules
    assert "tomlkit" not in modules
    assert "gpuprov.controller.kube.cluster_verify" not in modules


def test_the_probe_imports_http2_only_for_the_pod_resources():
    code, modules, out = run("gpuprov.host.agent.probe", "--health", "--unit", "x.service")
    assert code == 0 and json.loads(out)["schema"] == "gpuprov.probe/v1"
    assert not {"h2", "hpack", "gpuprov.host.kubelet.pod_resources"} & modules
    code, modules, out = run(
        "gpuprov.host.agent.probe", "--pod-resources", "/nonexistent/kubelet.sock"
    )
    assert code == 0 and "pod_resources" in json.loads(out)
    assert {"h2", "gpuprov.host.kubelet.pod_resources"} <= modules
