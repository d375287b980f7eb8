"""The agent's probe on a deployed lab host loads ``libnvidia-ml.so.1`` through pynvml's own
loader: the simulated library the lab's ``libnvidia-ml1`` installed at Debian's path, with no
hook in gpuprov and nothing of the lab's in the agent's process."""

from __future__ import annotations

import json

import pytest
from gpuprov_lab.sim.contract import SIM_NVML_LIBRARY_PATH

from gpuprov.host.contract import AGENT_PATH

pytestmark = pytest.mark.lab

# The agent bundle alone on sys.path (-I -S: no site-packages); after the probe, which pynvml
# library object it holds, which file the process mapped for it, and what the probe found.
PROBE = (
    'python3 -I -S -c \'import sys; sys.path.insert(0, "{agent}"); import json, pynvml;'
    "from gpuprov.host.agent import probe; document = probe.probe();"
    'maps = [line.split()[-1] for line in open("/proc/self/maps") if "libnvidia-ml" in line];'
    'print(json.dumps([pynvml.nvmlLib._name, sorted(set(maps)), document["nvml"],'
    ' len(document["gpus"]), sorted(sys.modules)]))\''
)


def test_the_agents_probe_loads_the_hosts_libnvidia_ml_by_its_name(lab, deployed):
    for host in lab.names:
        out = lab.run(host, PROBE.format(agent=AGENT_PATH)).stdout
        name, mapped, nvml, gpus, modules = json.loads(out)
        assert (name, mapped, nvml) == ("libnvidia-ml.so.1", [SIM_NVML_LIBRARY_PATH], "ok"), host
        assert gpus > 0, host
        assert [m for m in modules if m.startswith("gpuprov_lab")] == [], host
