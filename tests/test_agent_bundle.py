"""The agent bundle (agent.pyz): deterministic bytes, host-side modules only, runs on its own."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import admin
from simulated import library_path

from gpuprov.controller import bundle
from gpuprov.core.catalog import find_model
from gpuprov.core.mig.solver import solve
from gpuprov.host.agent import zipmain


def test_two_builds_give_the_same_bytes():
    # __wrapped__ skips the per-process cache, so this really builds twice.
    assert bundle.build_bundle.__wrapped__() == bundle.build_bundle.__wrapped__()


def test_entries_are_sorted_with_fixed_times_and_exactly_the_host_package():
    archive = zipfile.ZipFile(io.BytesIO(bundle.build_bundle()))
    names = archive.namelist()
    assert names == sorted(names)
    assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    package = Path(bundle.__file__).parents[1]
    host = sorted(
        p.relative_to(package.parent).as_posix()
        for p in (package / "host").rglob("*.py")
        if "__pycache__" not in p.parts
    )
    vendored = [n for n in names if n.split("/")[0] in bundle.VENDORED]
    assert names == sorted(["__main__.py", "pynvml.py", "gpuprov/__init__.py", *host, *vendored])
    # The gRPC client's HTTP/2 stack, whole and licensed (MIT): each installed module, verbatim.
    for package in bundle.VENDORED:
        module = importlib.import_module(package)
        root = Path(module.__file__).parent
        assert sorted(n for n in vendored if n.startswith(package + "/")) == sorted(
            [f"{package}/LICENSE"]
            + [
                f"{package}/{p.relative_to(root).as_posix()}"
                for p in root.rglob("*.py")
                if "__pycache__" not in p.parts
            ]
        )
        assert archive.read(f"{package}/__init__.py") == (root / "__init__.py").read_bytes()
        assert b"MIT" in archive.read(f"{package}/LICENSE")
    assert archive.read("__main__.py") == Path(zipmain.__file__).read_bytes()


def test_production_hosts_get_no_simulator_and_no_catalog():
    names = zipfile.ZipFile(io.BytesIO(bundle.build_bundle())).namelist()

    assert [n for n in names if n.startswith("gpuprov_lab/")] == []
    assert [n for n in names if n.startswith("gpuprov/core/catalog/") or n.endswith(".yaml")] == []


def test_the_bundled_pynvml_is_the_installed_nvidia_ml_py():
    import pynvml

    archive = zipfile.ZipFile(io.BytesIO(bundle.build_bundle()))
    assert archive.read("pynvml.py") == Path(pynvml.__file__).read_bytes()


def test_write_bundle_is_atomic_0644_and_matches_the_build(tmp_path):
    path = tmp_path / "agent.pyz"
    bundle.write_bundle(str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert (
        hashlib.sha1(path.read_bytes()).hexdigest()
        == hashlib.sha1(bundle.build_bundle()).hexdigest()
    )
    assert [p.name for p in tmp_path.iterdir()] == ["agent.pyz"]


def test_a_module_importing_a_non_host_package_is_refused():
    files = {
        "gpuprov/agent/x.py": b"import click\n",
        "gpuprov/agent/y.py": b"import yaml\n",
        "gpuprov/agent/z.py": b"from gpuprov.core.mig import solver\n",
    }
    for name, source in files.items():
        with pytest.raises(bundle.BundleError, match=f"{name} imports"):
            bundle._check_imports({name: source})
    # The stdlib, pynvml and the bundled HTTP/2 stack are fine; an import only a type checker
    # reads never runs.
    bundle._check_imports(
        {
            "gpuprov/agent/x.py": b"import json\nimport pynvml\nimport h2.connection\n"
            b"from typing import TYPE_CHECKING\n"
            b"if TYPE_CHECKING:\n    from gpuprov.core.plan import HostPlan\n"
        }
    )


# --- the bundle on its own: a clean interpreter whose sys.path is the zip (+ the stdlib) ---


@pytest.fixture
def agent(tmp_path) -> Path:
    path = tmp_path / "agent.pyz"
    bundle.write_bundle(str(path))
    return path


def run_isolated(
    agent: Path, *args: str, extra_path: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``main(args)`` from the zip in ``python -I -S``: no site-packages, no PYTHONPATH."""
    paths = [str(agent)] + ([str(extra_path)] if extra_path else [])
    code = (
        f"import sys; sys.path[:0] = {paths!r}\n"
        "from gpuprov.host.agent.main import main\n"
        "code = main(sys.argv[1:])\n"
        "import pynvml, gpuprov\n"
        f"assert pynvml.__file__.startswith({str(agent)!r})\n"
        f"assert gpuprov.__file__.startswith({str(agent)!r})\n"
        "print('yaml' in sys.modules, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *args],
        capture_output=True,
        text=True,
        env=env or {},
        check=False,
    )


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


def lab_driver(state: Path) -> dict[str, str]:
    """The environment of a lab host whose driver packages are installed: the simulated
    ``libnvidia-ml.so.1`` on the loader's path (there, /usr/lib/x86_64-linux-gnu) and its GPUs."""
    return {SIM_ENV: str(state), "LD_LIBRARY_PATH": str(library_path().parent)}


def test_bundle_probes_and_checks_a_simulated_host(agent, tmp_path):
    state = tmp_path / "gpus.json"
    admin.create(str(state), "A100-80GB", 2, seed="bundle")
    no_packages = tmp_path / "no-packages"  # the C library needs no Python package
    no_packages.mkdir()
    layout = tmp_path / "mig-layout.json"
    instances = solve(find_model("A100-80GB"), {"3g.40gb": 2}).instances
    layout.write_text(
        json.dumps(
            {
                "schema": "gpuprov.mig-layout/v1",
                "gpus": [
                    {"index": 1, "mig_enabled": True, "instances": [i.as_dict() for i in instances]}
                ],
            }
        )
    )
    env = lab_driver(state)

    probe = run_isolated(agent, "probe", extra_path=no_packages, env=env)
    check = run_isolated(
        agent, "apply", "--layout", str(layout), "--check", extra_path=no_packages, env=env
    )

    assert probe.returncode == 0, probe.stderr
    document = json.loads(probe.stdout)
    assert document["nvml"] == "ok"
    assert [g["mig"] for g in document["gpus"]] == [{"current": False, "pending": False}] * 2
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert report["changed"] and report["check"]
    assert [a["action"] for a in report["gpus"][0]["actions"]] == [
        "set-mig-mode",
        "reset",
        "create",
        "create",
    ]
    assert sim_state.load(str(state))["gpus"][1]["mig_pending"] is False


def test_the_zip_runs_as_a_script(agent, tmp_path):
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(agent), "probe"],
        capture_output=True,
        text=True,
        env={"GPUPROV_AGENT_CACHE": str(tmp_path / "cache")},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "gpuprov.probe/v1"


# --- the bytecode cache: __main__.py runs the agent from an extracted copy of the zip ---


def run_main(agent: Path, *args: str, extra_path: Path, env: dict) -> subprocess.CompletedProcess:
    """``python3 -I -S agent.pyz ARGS`` through runpy, as Python runs a zip; the last stderr line
    is where ``pynvml`` and ``gpuprov`` were imported from."""
    code = (
        f"import json, runpy, sys; sys.path[:0] = {[str(extra_path)]!r}\n"
        "try:\n"
        f"    runpy.run_path({str(agent)!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "origins = {m: sys.modules[m].__file__ for m in ('pynvml', 'gpuprov')}\n"
        "print(json.dumps(origins), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.fixture
def sim_host(tmp_path) -> tuple[dict, Path]:
    """The environment of a lab host with 8 simulated A100s (the simulated library where its
    driver package puts it), and an empty directory: no Python package beyond the bundle."""
    state = tmp_path / "gpus.json"
    admin.create(str(state), "A100-80GB", 8, seed="cache")
    no_packages = tmp_path / "no-packages"
    no_packages.mkdir()
    return {**lab_driver(state), "GPUPROV_AGENT_CACHE": str(tmp_path / "cache")}, no_packages


def cached_copy_of(agent: Path, cache: Path) -> Path:
    return cache / f"agent-{hashlib.sha256(agent.read_bytes()).hexdigest()[:16]}"


def test_the_second_run_imports_from_the_cached_copy_and_its_bytecode(agent, sim_host):
    env, no_packages = sim_host
    cache = Path(env["GPUPROV_AGENT_CACHE"])
    copy = cached_copy_of(agent, cache)
    pyc = copy / "__pycache__" / f"pynvml.{sys.implementation.cache_tag}.pyc"
    from_zip = run_isolated(agent, "probe", extra_path=no_packages, env=env)

    first = run_main(agent, "probe", extra_path=no_packages, env=env)
    assert first.returncode == 0, first.stderr
    assert pyc.is_file()
    compiled = pyc.stat()
    second = run_main(agent, "probe", extra_path=no_packages, env=env)
    # And as a plain script under -I, with the interpreter's own site-packages (yaml).
    script = subprocess.run(
        [sys.executable, "-I", str(agent), "probe"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )

    assert second.returncode == 0, second.stderr
    assert script.returncode == 0, script.stderr
    assert json.loads(from_zip.stdout)["nvml"] == "ok"
    assert first.stdout == second.stdout == script.stdout == from_zip.stdout
    assert json.loads(second.stderr.splitlines()[-1]) == {
        "pynvml": str(copy / "pynvml.py"),
        "gpuprov": str(copy / "gpuprov" / "__init__.py"),
    }
    # The later runs used the bytecode the first one wrote, and made no second copy.
    assert (pyc.stat().st_ino, pyc.stat().st_mtime_ns) == (compiled.st_ino, compiled.st_mtime_ns)
    assert list(cache.iterdir()) == [copy]
    assert stat.S_IMODE(copy.stat().st_mode) == 0o755
    assert stat.S_IMODE((copy / "pynvml.py").stat().st_mode) == 0o644


@pytest.mark.parametrize("unusable", ["under-a-file", "writable-by-others"])
def test_a_cache_that_cannot_be_used_falls_back_to_the_zip(agent, sim_host, tmp_path, unusable):
    env, no_packages = sim_host
    if unusable == "under-a-file":
        (tmp_path / "file").write_text("")
        cache = tmp_path / "file" / "cache"  # cannot be made, even by root
    else:
        cache = tmp_path / "open"
        cache.mkdir()
        cache.chmod(0o777)  # anyone could have put code there: not run
    env = {**env, "GPUPROV_AGENT_CACHE": str(cache)}

    done = run_main(agent, "probe", extra_path=no_packages, env=env)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nvml"] == "ok"
    origins = json.loads(done.stderr.splitlines()[-1])
    assert origins["pynvml"] == str(agent / "pynvml.py")
    assert unusable == "under-a-file" or list(cache.iterdir()) == []


def test_a_new_bundle_removes_copies_unused_for_an_hour(agent, sim_host):
    env, no_packages = sim_host
    cache = Path(env["GPUPROV_AGENT_CACHE"])
    old, recent, other = cache / f"agent-{'0' * 16}", cache / f"agent-{'1' * 16}", cache / "other"
    for path in (old, recent, other):
        (path / "gpuprov").mkdir(parents=True)
    two_hours_ago = (os.stat(old).st_mtime - 7200,) * 2
    os.utime(old, two_hours_ago)
    os.utime(other, two_hours_ago)

    done = run_main(agent, "probe", extra_path=no_packages, env=env)

    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [cached_copy_of(agent, cache).name, recent.name, other.name]
    )


def test_a_run_that_loses_the_race_uses_the_winners_copy(agent, tmp_path):
    target = tmp_path / "agent-winner"
    (target / "gpuprov").mkdir(parents=True)

    zipmain._extract(str(agent), str(tmp_path), str(target))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent-winner", "agent.pyz"]
    assert [p.name for p in target.iterdir()] == ["gpuprov"]


def test_the_bundle_refuses_a_layout_by_asking_nvml_not_a_catalog(agent, sim_host, tmp_path):
    env, no_packages = sim_host
    layout = tmp_path / "bad-layout.json"
    layout.write_text(
        json.dumps(
            {
                "schema": "gpuprov.mig-layout/v1",
                "gpus": [
                    {
                        "index": 0,
                        "mig_enabled": True,
                        "instances": [
                            {"profile": "2g.20gb", "profile_id": 9, "start": 0, "size": 4}
                        ],
                    }
                ],
            }
        )
    )
    state = Path(env[SIM_ENV])
    before = state.read_bytes()

    done = run_isolated(agent, "apply", "--layout", str(layout), extra_path=no_packages, env=env)

    assert done.returncode == 2, done.stderr
    assert "profile id 9 is 3g.40gb on this GPU, not 2g.20gb" in done.stderr
    assert state.read_bytes() == before


def test_a_lab_host_before_its_driver_package_has_no_nvml_library(agent, sim_host, tmp_path):
    env, no_packages = sim_host
    env = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}  # no libnvidia-ml1 yet

    done = run_isolated(agent, "probe", extra_path=no_packages, env=env)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nvml"] == "library-not-found"
