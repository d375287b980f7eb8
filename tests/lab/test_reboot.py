"""A reboot inside a lab host is a real one for the simulated driver: MIG mode stays, instances go."""

from __future__ import annotations

import json
import time

import pytest
from gpuprov_lab import services
from gpuprov_lab.packages import DRIVER_PACKAGES

pytestmark = [pytest.mark.lab, pytest.mark.lab_fresh]

HOST = "lab-h100-01"
APT = (
    "apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/tmp/rb/sources "
    "-o Dir::State::Lists=/tmp/rb/lists"
)
# Two GPU instances on GPU 0 through NVML on the host (nvidia-smi, the C program over it).
CREATE_GIS = "nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb"


def gpu0(lab) -> dict:
    return json.loads(lab.run(HOST, "cat /var/lib/nvidia-sim/gpus.json").stdout)["gpus"][0]


def wait_rebooted(lab, boot_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = lab.run(
            HOST,
            "cat /proc/sys/kernel/random/boot_id; systemctl is-system-running --wait",
            check=False,
        )
        if result.returncode in (0, 1) and result.stdout.split()[:1] not in ([boot_id], []):
            return
        time.sleep(0.5)
    raise AssertionError(f"{HOST} did not come back from the reboot within {timeout} s")


def test_reboot_clears_gpu_instances_and_keeps_mig_mode(lab):
    key = lab.run_dir.repo_key.read_text()
    lab.run(HOST, "rm -rf /tmp/rb; mkdir -p /tmp/rb/sources /tmp/rb/lists/partial /tmp/rb/key")
    lab.run(HOST, f"cat > /tmp/rb/key/lab.asc <<'EOF'\n{key}EOF")
    lab.run(
        HOST,
        f"printf 'Types: deb\\nURIs: {services.repo_url('non-free')}\\nSuites: /\\n"
        "Signed-By: /tmp/rb/key/lab.asc\\n' > /tmp/rb/sources/lab.sources",
    )
    try:
        lab.run(
            HOST,
            f"{APT} update && DEBIAN_FRONTEND=noninteractive {APT} install -y "
            "nvidia-driver=535.261.03-1 nvidia-smi=535.261.03-1",
        )
        lab.run(HOST, "nvidia-smi -i 0 -mig 1 && nvidia-smi -i 0 -r")
        lab.run(HOST, CREATE_GIS)
        before = gpu0(lab)
        assert before["mig_current"] and len(before["gpu_instances"]) == 2

        boot_id = lab.run(HOST, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
        lab.run(HOST, "systemctl reboot", check=False)
        wait_rebooted(lab, boot_id)

        after = gpu0(lab)
        assert after["mig_current"] is True and after["mig_pending"] is True
        assert after["gpu_instances"] == []
        uptime = float(lab.run(HOST, "cut -d' ' -f1 /proc/uptime").stdout)
        assert uptime < 60  # the host's clock restarted, as pyinfra's server.reboot expects
    finally:
        lab.run(
            HOST,
            "nvidia-smi -i 0 -mig 0 && nvidia-smi -i 0 -r; "
            f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {' '.join(DRIVER_PACKAGES)};"
            " rm -rf /tmp/rb",
            check=False,
        )
