"""What the simulated ``libnvidia-ml.so.1`` exports and how it behaves as a shared library:
every NVML symbol NVIDIA's device plugin links is defined, the functions it does not serve
answer NOT_SUPPORTED (and are traced), many threads read while the state is rewritten, and
pynvml, the probe included, loads it with its own loader.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from gpuprov_lab.sim.contract import SIM_ENV, SIM_TRACE_ENV
from gpuprov_lab.sim.libnvml import build
from simulated import new_host
from upstream import upstream_binary

SERVED = re.compile(r"SERVED\((nvml\w+),")
SOURCE = Path(build.__file__).parent


@pytest.fixture(scope="session")
def library() -> Path:
    return build.library()


# -- pynvml's own loader -----------------------------------------------------------------------

LOADED = """
import json, pynvml
from gpuprov.host.agent import probe
document = probe.probe()
print(json.dumps([type(pynvml.nvmlLib).__name__, pynvml.nvmlLib._name, document["gpus"][0]["name"]]))
"""


def test_the_probe_loads_libnvidia_ml_through_pynvmls_own_loader(library, tmp_path):
    """As on a host with the driver installed: the library is found by its name on the
    loader's search path, and nothing in gpuprov points pynvml anywhere."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(library.parent), SIM_ENV: new_host(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", LOADED], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["CDLL", "libnvidia-ml.so.1", "NVIDIA A100-SXM4-80GB"]


# -- many threads ------------------------------------------------------------------------------

CONCURRENT_READERS = """
import ctypes, sys, threading
from concurrent.futures import ThreadPoolExecutor
from gpuprov_lab.sim import state

library, path = sys.argv[1:]
lib = ctypes.CDLL(library)
assert lib.nvmlInit_v2() == 0

def rewrite():
    for _ in range(200):
        with state.transaction(path) as current:
            current["gpus"][1]["mig_pending"] = not current["gpus"][1]["mig_pending"]

def names(_):
    seen = set()
    for i in range(300):
        handle, name = ctypes.c_void_p(), ctypes.create_string_buffer(96)
        rc = lib.nvmlDeviceGetHandleByIndex_v2(i % 2, ctypes.byref(handle))
        seen.add((rc, lib.nvmlDeviceGetName(handle, name, 96), name.value.decode()))
    return seen

writer = threading.Thread(target=rewrite, daemon=True)
writer.start()
with ThreadPoolExecutor(max_workers=8) as pool:
    answers = set().union(*pool.map(names, range(8)))
writer.join(timeout=60)
print(sorted(answers), lib.nvmlShutdown())
"""


def test_many_threads_read_while_the_state_is_rewritten(library, tmp_path):
    """The device plugin calls from many Go threads while the applier rewrites the state file.

    In a child process with a time limit: a lost wake-up or a crash must fail, not hang.
    """
    path = new_host(tmp_path, "H100-80GB", 2, mig=[0])
    out = subprocess.run(
        [sys.executable, "-c", CONCURRENT_READERS, str(library), path],
        env={**os.environ, SIM_ENV: path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "[(0, 0, 'NVIDIA H100 80GB HBM3')] 0"


# -- what the C library does not serve ---------------------------------------------------------


def _served() -> set[str]:
    return set(SERVED.findall((SOURCE / "nvml_sim.c").read_text())) | {
        "nvmlInit",
        "nvmlInit_v2",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlErrorString",
    }


def _unsupported() -> list[str]:
    return re.findall(r"^UNSUPPORTED\((\w+)\)", (SOURCE / "unsupported.h").read_text(), re.M)


def test_every_unserved_function_answers_not_supported_and_is_traced(
    library, tmp_path, monkeypatch
):
    monkeypatch.setenv(SIM_ENV, new_host(tmp_path))
    monkeypatch.setenv(SIM_TRACE_ENV, str(tmp_path / "trace"))
    lib = ctypes.CDLL(str(library))
    assert lib.nvmlInit_v2() == pynvml.NVML_SUCCESS
    # The calls that change the GPUs are served now (tests/test_nvml_sim_rules.py), not stubs.
    assert not {"nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance"} & set(_unsupported())
    answers = {name: getattr(lib, name)(None, None, None, None) for name in _unsupported()}
    assert set(answers.values()) == {pynvml.NVML_ERROR_NOT_SUPPORTED}
    assert lib.nvmlShutdown() == pynvml.NVML_SUCCESS
    trace = (tmp_path / "trace").read_text().splitlines()
    assert trace == ["nvmlInit_v2 0", *(f"{name} 3" for name in answers), "nvmlShutdown 0"]


@pytest.fixture(scope="session")
def plugin_symbols() -> set[str]:
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf")
    binary = upstream_binary("nvidia-device-plugin")
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    fields = (line.split() for line in out.splitlines())
    return {f[7] for f in fields if len(f) > 7 and f[6] == "UND" and f[7].startswith("nvml")}


def test_every_nvml_symbol_the_device_plugin_links_is_defined(library, plugin_symbols):
    lib = ctypes.CDLL(str(library))
    assert len(plugin_symbols) > 400
    assert [name for name in sorted(plugin_symbols) if not hasattr(lib, name)] == []
    assert plugin_symbols == _served() | set(_unsupported())
