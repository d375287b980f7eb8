"""The lab's stand-ins for nvidia-container-runtime and NVIDIA's prestart hook, as the lab's
packages ship them, run here (no root): the runtime adds the hook to the OCI spec of `create`
and hands every command, unchanged, to the first low-level runtime of its config; the hook
checks NVIDIA_VISIBLE_DEVICES against the simulated C libnvidia-ml.so.1.

That containerd, crun and the kubelet run pods through them is tests/lab/test_pods.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from gpuprov_lab import packages
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import build
from simulated import edit, new_host

PYTHON = "/usr/bin/python3"  # the lab hosts' (Debian's); the stand-ins name it in their #!
HOOK = "nvidia-container-runtime-hook"


def _installed(directory: Path, name: str) -> Path:
    """The stand-in ``name`` as the lab's toolkit package ships it (version filled in)."""
    path = directory / name
    path.write_bytes(packages._file(f"toolkit/{name}", "1.17.8").content)
    path.chmod(0o755)
    return path


@pytest.fixture
def runtime(tmp_path):
    """The runtime stand-in, a low-level runtime that records its arguments, a hook on PATH and
    a bundle; returns a function that runs the runtime with arguments."""
    if not Path(PYTHON).is_file():
        pytest.skip(f"needs {PYTHON}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _installed(bin_dir, "nvidia-container-runtime")
    (bin_dir / HOOK).write_text("#!/bin/sh\n")
    (bin_dir / HOOK).chmod(0o755)
    low_level = bin_dir / "recorded-runc"
    low_level.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\n')
    low_level.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-runtime]\nruntimes = ["no-such-runc", "recorded-runc"]\n')
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"process": {"env": ["A=1"]}}))

    def run(*args: str, env_config: Path = config) -> subprocess.CompletedProcess:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(env_config)}
        return subprocess.run(
            [str(bin_dir / "nvidia-container-runtime"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    run.tmp = tmp_path  # type: ignore[attr-defined]
    run.bundle = bundle  # type: ignore[attr-defined]
    run.hook = bin_dir / HOOK  # type: ignore[attr-defined]
    return run


def test_create_adds_nvidias_prestart_hook_once_and_passes_every_argument_on(runtime):
    argv = ["--root", "/r", "--systemd-cgroup", "create", "--bundle", str(runtime.bundle), "c1"]
    for _ in range(2):  # a retried create finds the hook there already
        result = runtime(*argv)
        assert result.returncode == 0, result.stderr
    assert (runtime.tmp / "argv").read_text().splitlines() == argv
    spec = json.loads((runtime.bundle / "config.json").read_text())
    hook = str(runtime.hook)
    assert spec["hooks"] == {"prestart": [{"path": hook, "args": [hook, "prestart"]}]}
    assert spec["process"]["env"] == ["A=1"]  # the environment is the container's, untouched


def test_other_commands_leave_the_spec_alone(runtime):
    before = (runtime.bundle / "config.json").read_text()
    result = runtime("--root", "/r", "state", "c1")
    assert result.returncode == 0, result.stderr
    assert (runtime.tmp / "argv").read_text().splitlines() == ["--root", "/r", "state", "c1"]
    assert (runtime.bundle / "config.json").read_text() == before


def test_no_low_level_runtime_is_an_error_naming_the_candidates(runtime):
    config = runtime.tmp / "none.toml"
    config.write_text('[nvidia-container-runtime]\nruntimes = ["no-such-runc"]\n')
    result = runtime("state", "c1", env_config=config)
    assert result.returncode == 1
    assert "no runtime binary found from ['no-such-runc']" in result.stderr


@pytest.fixture
def hook(tmp_path):
    """The hook stand-in over the simulated C NVML of a 2 x H100 host, GPU 1 with MIG on;
    returns a function that runs it as a runtime would for NVIDIA_VISIBLE_DEVICES=value."""
    if not Path(PYTHON).is_file():
        pytest.skip(f"needs {PYTHON}")
    try:
        library = build.library()
    except build.BuildError as e:
        pytest.skip(str(e))
    state = new_host(tmp_path, "H100-80GB", 2)
    program = _installed(tmp_path, HOOK)
    bundle = tmp_path / "bundle"
    bundle.mkdir()

    def run(value: str | None) -> subprocess.CompletedProcess:
        env = [] if value is None else [f"NVIDIA_VISIBLE_DEVICES={value}"]
        (bundle / "config.json").write_text(json.dumps({"process": {"env": env}}))
        return subprocess.run(
            [str(program), "prestart"],
            input=json.dumps({"ociVersion": "1.0.2", "id": "c1", "pid": 1, "bundle": str(bundle)}),
            env={"LD_LIBRARY_PATH": str(library.parent), SIM_ENV: state},
            capture_output=True,
            text=True,
            timeout=30,
        )

    run.state = state  # type: ignore[attr-defined]
    return run


def _uuids(state: str) -> list[str]:
    return [gpu["uuid"] for gpu in json.loads(Path(state).read_text())["gpus"]]


def test_the_hook_accepts_the_gpus_the_driver_has_by_uuid_or_index(hook):
    first, second = _uuids(hook.state)
    for value in (first, f"{first},{second}", "1", "all"):
        result = hook(value)
        assert result.returncode == 0, (value, result.stderr)


def test_the_hook_does_nothing_for_a_container_without_gpus(hook):
    os.unlink(hook.state)  # no driver at all: still nothing to check
    for value in (None, "", "void"):
        result = hook(value)
        assert result.returncode == 0, (value, result.stderr)


def test_the_hook_fails_a_device_the_driver_does_not_know_with_the_clis_words(hook):
    result = hook(f"{_uuids(hook.state)[0]},GPU-00000000-0000-0000-0000-000000000000")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "nvidia-container-cli: device error: GPU-00000000-0000-0000-0000-000000000000: "
        "unknown device"
    )


def test_the_hook_fails_when_the_driver_is_not_loaded(hook):
    with edit(hook.state) as state:
        state["driver"]["loaded"] = False
    result = hook(_uuids(hook.state)[0])
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "nvidia-container-cli: initialization error: nvml error: driver not loaded"
    )
