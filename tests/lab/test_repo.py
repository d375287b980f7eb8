"""The lab's apt repository: signed, verified by apt, and its simulated driver works."""

from __future__ import annotations

import json

import pytest
from gpuprov_lab import services
from gpuprov_lab.packages import DRIVER_PACKAGES

pytestmark = [pytest.mark.lab, pytest.mark.lab_fresh]

# apt on a lab host, looking only at one test source directory with its own lists, so these
# tests neither fetch Debian's indices nor leave sources behind for the deploy to trip over.
APT = (
    "apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/tmp/{d}/sources "
    "-o Dir::State::Lists=/tmp/{d}/lists"
)
# A second NVML client on the host, as the container toolkit's is: libnvidia-ml.so.1 by name.
NVML_NAMES = (
    'python3 -c \'import ctypes, json; n = ctypes.CDLL("libnvidia-ml.so.1");'
    "assert n.nvmlInit_v2() == 0; c = ctypes.c_uint(); n.nvmlDeviceGetCount_v2(ctypes.byref(c));"
    "h = [ctypes.c_void_p() for _ in range(c.value)];"
    "[n.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(x)) for i, x in enumerate(h)];"
    "b = [ctypes.create_string_buffer(96) for _ in h];"
    "[n.nvmlDeviceGetName(x, y, 96) for x, y in zip(h, b)];"
    "print(json.dumps([y.value.decode() for y in b]))'"
)


def source(host_key: str) -> str:
    """A deb822 source for the lab's driver repository, as the deploy writes it."""
    return f"Types: deb\nURIs: {services.repo_url('non-free')}\nSuites: /\nSigned-By: {host_key}\n"


def prepare(lab, host: str, d: str, key_on_host: str) -> None:
    lab.run(host, f"rm -rf /tmp/{d}; mkdir -p /tmp/{d}/sources /tmp/{d}/lists/partial")
    lab.run(host, f"cat > /tmp/{d}/sources/lab.sources <<'EOF'\n{source(key_on_host)}EOF")


def test_signed_repo_verifies_with_the_lab_key_and_fails_with_another(lab):
    host = "lab-a100-01"
    key = lab.run_dir.repo_key.read_text()
    lab.run(host, f"mkdir -p /tmp/keys && cat > /tmp/keys/lab.asc <<'EOF'\n{key}EOF")
    prepare(lab, host, "good", "/tmp/keys/lab.asc")
    good = lab.run(host, APT.format(d="good") + " update")
    assert "Err" not in good.stdout
    policy = lab.run(
        host,
        APT.format(d="good").replace("apt-get", "apt-cache") + " policy nvidia-driver",
    ).stdout
    assert "535.261.03-1" in policy and "535.216.03-2~bpo12+1" in policy

    prepare(lab, host, "bad", "/usr/share/keyrings/debian-archive-keyring.gpg")
    bad = lab.run(host, APT.format(d="bad") + " update", check=False)
    assert bad.returncode != 0
    assert "NO_PUBKEY" in bad.stdout + bad.stderr


def test_driver_package_brings_nvidia_smi_and_nvml_that_see_the_host_gpus(lab):
    key = lab.run_dir.repo_key.read_text()
    try:
        for host in lab.hosts:
            lab.run(host.name, f"mkdir -p /tmp/keys && cat > /tmp/keys/lab.asc <<'EOF'\n{key}EOF")
            prepare(lab, host.name, "drv", "/tmp/keys/lab.asc")
            apt = APT.format(d="drv")
            lab.run(
                host.name,
                f"{apt} update && DEBIAN_FRONTEND=noninteractive {apt} install -y "
                "nvidia-driver=535.261.03-1 nvidia-smi=535.261.03-1 nvidia-persistenced",
            )
            listing = lab.run(host.name, "nvidia-smi -L").stdout.splitlines()
            assert len(listing) == host.count
            names = json.loads(lab.run(host.name, NVML_NAMES).stdout)
            assert names == [listing[0].split(": ", 1)[1].split(" (UUID")[0]] * host.count
            assert host.model.split("-")[0] in names[0]
            state = json.loads(lab.run(host.name, "cat /var/lib/nvidia-sim/gpus.json").stdout)
            assert state["driver"] == {"loaded": True, "version": "535.261.03"}
            assert lab.testinfra(host.name).service("nvidia-persistenced").is_running
    finally:
        for host in lab.hosts:
            lab.run(
                host.name,
                # Only those installed: apt refuses the whole purge for a name its sources
                # (here the test's own repository) do not list, such as nvidia-cuda-mps.
                f"pkgs=$(dpkg-query -W -f '${{Package}} ' {' '.join(DRIVER_PACKAGES)} 2>/dev/null); "
                "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $pkgs; "
                "rm -rf /tmp/drv /tmp/good /tmp/bad",
                check=False,
            )
    state = json.loads(lab.run("lab-h100-01", "cat /var/lib/nvidia-sim/gpus.json").stdout)
    assert state["driver"]["loaded"] is False
