"""The probe never hangs or runs out of memory on what ``--file`` names, and a malformed
simulated-driver state file is a clear ``nvml: error``, never a traceback (issue #11 item 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from gpuprov_lab.sim.contract import SIM_ENV
from simulated import new_host, programs

from gpuprov.controller.inventory import load
from gpuprov.core.checks.host import compare, wanted_files
from gpuprov.core.plan import build
from gpuprov.host.agent import probe
from gpuprov.host.contract import PROBE_FILE_MAX_BYTES, PROBE_SCHEMA


def run_probe(*args: str, env: dict | None = None, timeout: float = 20) -> dict:
    """``gpuprov probe ARGS`` in its own process, which must finish within ``timeout``."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuprov", "probe", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def test_dev_zero_a_fifo_and_a_directory_are_reported_not_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a plain open() would wait forever

    started = time.monotonic()
    files = run_probe("--file", "/dev/zero", "--file", str(fifo), "--file", str(tmp_path))["files"]

    assert time.monotonic() - started < 20
    assert files == {
        "/dev/zero": {"error": "not a regular file (character device)"},
        str(fifo): {"error": "not a regular file (FIFO)"},
        str(tmp_path): {"error": "not a regular file (directory)"},
    }


def test_a_file_over_the_limit_is_reported_with_its_size_and_not_read(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(4 << 30)  # 4 GiB, sparse: reading it would take the memory
    exact = tmp_path / "exact.yaml"
    exact.write_bytes(b"a" * PROBE_FILE_MAX_BYTES)

    files = run_probe("--file", str(big), "--file", str(exact))["files"]

    assert files[str(big)] == {
        "error": f"larger than {PROBE_FILE_MAX_BYTES} bytes ({4 << 30}); the probe reads no more"
    }
    assert files[str(exact)] == "a" * PROBE_FILE_MAX_BYTES


def test_a_file_whose_size_the_kernel_does_not_know_is_read_up_to_the_limit():
    # /proc files say size 0; the probe still reads their text, bounded.
    text = probe.read_file("/proc/self/status")
    assert isinstance(text, str) and "Name:" in text
    assert probe.read_file("/proc/self/status", limit=10) == {
        "error": "larger than 10 bytes; the probe reads no more"
    }


def test_a_file_that_cannot_be_opened_is_an_error_not_missing(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)  # exists as a name, but opening it fails (ELOOP)

    assert probe.read_file(str(loop)) == {"error": "unreadable: Too many levels of symbolic links"}
    assert probe.read_file(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("driver"), "driver must be {loaded: true|false, version: text}"),
        (lambda s: s["gpus"][0].pop("uuid"), "gpus[0] must have index (count), model (text)"),
        (
            lambda s: s["gpus"][0].update(model="Z100"),
            "gpus[0].model 'Z100' is not a catalog model",
        ),
        (lambda s: s["gpus"][0].update(index=3), "gpus[0].index is 3, expected 0"),
        (lambda s: s["gpus"][0].update(mig_current="yes"), "gpus[0] must have"),
        (lambda s: s["driver"].update(version="new"), "driver.version 'new' is not a driver"),
        (lambda s: s.update(gpus=[]), "gpus must be a non-empty list"),
        (
            lambda s: s["gpus"][0].update(gpu_instances=[{"id": 1}]),
            "gpus[0].gpu_instances[0] must have id, profile_id, start, size, compute_instances",
        ),
        (lambda s: s["faults"].update(fail_after={"x": 1}), "faults.fail_after must be"),
    ],
)
def test_a_malformed_simulated_driver_state_is_a_clear_nvml_error(tmp_path, edit, message):
    path = new_host(tmp_path)
    state = json.loads(open(path).read())
    edit(state)
    with open(path, "w") as f:
        json.dump(state, f)

    document = run_probe(env={SIM_ENV: path})
    # The driver says what NVML says of a broken driver; what is broken, the simulator's own tool.
    shown = subprocess.run(
        [str(programs()["gpuprov-sim"]), "--state", path, "show"], capture_output=True, text=True
    )

    assert (document["nvml"], document["error"], document["gpus"]) == ("error", "Unknown Error", [])
    assert shown.returncode == 2
    assert shown.stderr.startswith(f"gpuprov-sim: error: {path}: not a valid")
    assert message in shown.stderr


@pytest.mark.parametrize("text", ["{", "[]", '{"schema": "gpuprov.sim/v1"}', "\x00"])
def test_a_state_file_that_is_not_a_state_is_named_by_the_sims_own_tools(tmp_path, text):
    path = tmp_path / "gpus.json"
    path.write_text(text)
    env = {**os.environ, SIM_ENV: str(path)}

    smi = subprocess.run(
        [str(programs()["nvidia-smi"]), "-L"], capture_output=True, text=True, env=env
    )
    admin = subprocess.run(
        [str(programs()["gpuprov-sim"]), "show"],
        capture_output=True,
        text=True,
        env=env,
    )

    # nvidia-smi is a thin program over NVML, as the real one: it says what NVML says.
    assert smi.stdout == "Failed to initialize NVML: Unknown Error\n" and smi.returncode != 0
    assert smi.stderr == ""
    assert admin.stderr.startswith(f"gpuprov-sim: error: {path}: ") and admin.returncode == 2
    assert len(admin.stderr.splitlines()) == 1


def test_verify_turns_a_file_the_probe_would_not_read_into_a_finding(tmp_path):
    inventory = tmp_path / "inv.py"
    inventory.write_text(
        "whole_card = [('n1', {'gpu_model': 'A100-80GB', 'gpu_count': 1, "
        "'driver_version': '535.261.03'})]\n"
    )
    plan = build(load(str(inventory))).host("n1")
    files = wanted_files(plan).files
    marker = {
        "error": f"larger than {PROBE_FILE_MAX_BYTES} bytes (5000000); the probe reads no more"
    }
    observed = {
        "schema": PROBE_SCHEMA,
        "nvml": "library-not-found",
        "error": "NVML Shared Library Not Found",
        "driver_version": None,
        "nvml_version": None,
        "gpus": [],
        "files": {path: marker for path in files},
    }

    found = [f for f in compare(plan, observed) if marker["error"] in f.found]

    assert found and all(f.found == f"not read by the probe: {marker['error']}" for f in found)
