"""What every test runs with: the agent's bytecode cache in a temporary directory, not
/var/cache, and the simulated driver's ``libnvidia-ml.so.1`` as this machine's NVML.

The library (lab/gpuprov_lab/sim/libnvml, compiled once per machine and cached) is loaded by
its path before any test, so that pynvml's own ``CDLL("libnvidia-ml.so.1")`` in this process
resolves to it, and its directory leads ``LD_LIBRARY_PATH``, so that every child process (the
agent, the probe, NVIDIA's device plugin) loads it by the same name, as from the system path on
a lab host. Which GPUs it shows is the state file ``$GPUPROV_NVML_SIM`` names, read on every
call: a test sets it (``simulated.use(path)``, ``monkeypatch.setenv``) to the host it made.
"""

from __future__ import annotations

import os

import pytest
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import build, preload


@pytest.fixture(autouse=True, scope="session")
def _simulated_driver():
    library = preload.preload(build.library())
    os.environ["LD_LIBRARY_PATH"] = preload.environment(library)["LD_LIBRARY_PATH"]
    yield library


@pytest.fixture(autouse=True)
def _simulated_host():
    """Whatever host a test pointed the library at, the next test starts without it."""
    saved = os.environ.get(SIM_ENV)
    yield
    if saved is None:
        os.environ.pop(SIM_ENV, None)
    else:
        os.environ[SIM_ENV] = saved


@pytest.fixture(autouse=True)
def _agent_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GPUPROV_AGENT_CACHE", str(tmp_path_factory.mktemp("agent-cache")))
