"""The agent bundle (agent.pyz): deterministic bytes, host-side modules only, runs on its own."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from gpuprov.agent import bundle
from gpuprov.catalog import find_model
from gpuprov.mig.solver import solve
from gpuprov.sim import state as sim_state


def test_two_builds_give_the_same_bytes():
    # __wrapped__ skips the per-process cache, so this really builds twice.
    assert bundle.build_bundle.__wrapped__() == bundle.build_bundle.__wrapped__()


def test_entries_are_sorted_with_fixed_times_and_only_host_side_modules():
    archive = zipfile.ZipFile(io.BytesIO(bundle.build_bundle()))
    names = archive.namelist()
    assert names == sorted(names)
    assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert {"__main__.py", "pynvml.py", "gpuprov/__init__.py", "gpuprov/probe.py",
            "gpuprov/agent/apply.py", "gpuprov/mig/diff.py", "gpuprov/sim/nvml.py",
            "gpuprov/catalog/gpus.yaml"} <= set(names)
    for planner_side in ("gpuprov/plan.py", "gpuprov/mig/solver.py", "gpuprov/cli/__init__.py"):
        assert planner_side not in names
    assert not [n for n in names if "__pycache__" in n]


def test_the_bundled_pynvml_is_the_installed_nvidia_ml_py():
    import pynvml

    archive = zipfile.ZipFile(io.BytesIO(bundle.build_bundle()))
    assert archive.read("pynvml.py") == Path(pynvml.__file__).read_bytes()


def test_write_bundle_is_atomic_0644_and_matches_the_build(tmp_path):
    path = tmp_path / "agent.pyz"
    bundle.write_bundle(str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert hashlib.sha1(path.read_bytes()).hexdigest() == \
        hashlib.sha1(bundle.build_bundle()).hexdigest()
    assert [p.name for p in tmp_path.iterdir()] == ["agent.pyz"]


def test_a_module_importing_a_non_host_package_is_refused():
    files = {"gpuprov/agent/x.py": b"import click\n", "gpuprov/agent/y.py": b"import yaml\n",
             "gpuprov/agent/z.py": b"from gpuprov.mig import solver\n"}
    for name, source in files.items():
        with pytest.raises(bundle.BundleError, match=f"{name} imports"):
            bundle._check_imports({name: source})
    # The simulation may read its YAML catalog; the stdlib and pynvml are fine everywhere.
    bundle._check_imports({"gpuprov/sim/x.py": b"import yaml\nimport json\nimport pynvml\n"})


# --- the bundle on its own: a clean interpreter whose sys.path is the zip (+ the stdlib) ---

@pytest.fixture
def agent(tmp_path) -> Path:
    path = tmp_path / "agent.pyz"
    bundle.write_bundle(str(path))
    return path


def run_isolated(agent: Path, *args: str, extra_path: Path | None = None,
                 env: dict | None = None) -> subprocess.CompletedProcess:
    """``main(args)`` from the zip in ``python -I -S``: no site-packages, no PYTHONPATH."""
    paths = [str(agent)] + ([str(extra_path)] if extra_path else [])
    code = (f"import sys; sys.path[:0] = {paths!r}\n"
            "from gpuprov.agent.main import main\n"
            "code = main(sys.argv[1:])\n"
            "import pynvml, gpuprov\n"
            f"assert pynvml.__file__.startswith({str(agent)!r})\n"
            f"assert gpuprov.__file__.startswith({str(agent)!r})\n"
            "print('yaml' in sys.modules, file=sys.stderr)\n"
            "sys.exit(code)\n")
    return subprocess.run([sys.executable, "-I", "-S", "-c", code, *args], capture_output=True,
                          text=True, env=env or {}, check=False)


def test_bundle_runs_probe_and_apply_without_any_installed_package(agent, tmp_path):
    layout = tmp_path / "mig-layout.json"
    layout.write_text(json.dumps({"schema": "gpuprov.mig-layout/v1", "gpus": []}))

    probe = run_isolated(agent, "probe")
    apply = run_isolated(agent, "apply", "--layout", str(layout), "--check")

    # No driver here: both say so, and neither needed pyyaml (the last stderr line).
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout)["nvml"] == "library-not-found"
    assert probe.stderr.splitlines()[-1] == "False"
    assert apply.returncode == 1
    assert json.loads(apply.stdout)["error"] == "NVML: NVML Shared Library Not Found"
    assert apply.stderr.splitlines()[-1] == "False"


def test_bundle_probes_and_checks_a_simulated_host(agent, tmp_path):
    state = tmp_path / "gpus.json"
    sim_state.write_new(str(state), sim_state.new_state("A100-80GB", 2, seed="bundle"))
    only_yaml = tmp_path / "only-yaml"
    shutil.copytree(Path(yaml.__file__).parent, only_yaml / "yaml")  # the simulation's catalog
    layout = tmp_path / "mig-layout.json"
    instances = solve(find_model("A100-80GB"), {"3g.40gb": 2}).instances
    layout.write_text(json.dumps({"schema": "gpuprov.mig-layout/v1", "gpus": [
        {"index": 1, "mig_enabled": True, "instances": [i.as_dict() for i in instances]}]}))
    env = {"GPUPROV_NVML_SIM": str(state)}

    probe = run_isolated(agent, "probe", extra_path=only_yaml, env=env)
    check = run_isolated(agent, "apply", "--layout", str(layout), "--check",
                         extra_path=only_yaml, env=env)

    assert probe.returncode == 0, probe.stderr
    document = json.loads(probe.stdout)
    assert document["nvml"] == "ok"
    assert [g["mig"] for g in document["gpus"]] == [{"current": False, "pending": False}] * 2
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert report["changed"] and report["check"]
    assert [a["action"] for a in report["gpus"][0]["actions"]] == [
        "set-mig-mode", "reset", "create", "create"]
    assert sim_state.load(str(state))["gpus"][1]["mig_pending"] is False


def test_the_zip_runs_as_a_script(agent):
    done = subprocess.run([sys.executable, "-I", "-S", str(agent), "probe"], capture_output=True,
                          text=True, env={}, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "gpuprov.probe/v1"
