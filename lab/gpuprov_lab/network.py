"""The lab network: bridge gpl-br0 (10.200.0.1/24) and one network namespace per host.

A lab in slot N (``GPUPROV_LAB_SLOT``) has bridge gplN-br0 on 10.200.N.1/24 and namespaces gplN-<index>.

Each host's namespace ``gpl-<index>`` has ``eth0``, the peer of ``gpl-v<index>`` on the bridge.
There is no NAT and no forwarding: hosts reach only 10.200.0.0/24 (the lab's own services).

>>> netns_name(3), veth_name(3)
('gpl-3', 'gpl-v3')
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from gpuprov_lab.errors import LabError
from gpuprov_lab.spec import GATEWAY, slot

# Slot 0 keeps the names it always had; slot N's names start gplN- (no prefix is another's).
PREFIX = "gpl-" if slot() == 0 else f"gpl{slot()}-"
BRIDGE = f"{PREFIX}br0"


def netns_name(index: int) -> str:
    return f"{PREFIX}{index}"


def veth_name(index: int) -> str:
    return f"{PREFIX}v{index}"


def netns_path(index: int) -> str:
    return f"/run/netns/{netns_name(index)}"


def add_bridge() -> None:
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def add_host(index: int, ip: str) -> None:
    """Create the host's namespace and plug it into the bridge with address ``ip``."""
    ns, veth = netns_name(index), veth_name(index)
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("link", "set", veth, "master", BRIDGE, "up")
    _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "route", "add", "default", "via", GATEWAY)


def remove_all() -> None:
    """Delete every lab namespace, veth and the bridge; wait for the async veth teardown."""
    for ns in leftover_namespaces():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    # The kernel frees a namespace's veth pair a little after the last user is gone; an
    # immediate `up` would then fail with "File exists".
    deadline = time.monotonic() + 5
    while leftover_veths() and time.monotonic() < deadline:
        time.sleep(0.1)
    for veth in leftover_veths():
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
    if bridge_exists():
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def set_link(index: int, up: bool) -> None:
    """Plug host ``index`` into the bridge or pull it out (its veth up or down)."""
    _ip("link", "set", veth_name(index), "up" if up else "down")


def drop_connections(index: int, port: int) -> None:
    """Make host ``index`` forget its established TCP connections on local ``port``, as a
    restarted host would (``ss -K`` in its namespace)."""
    result = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            netns_name(index),
            "ss",
            "-K",
            "-t",
            "state",
            "established",
            f"( sport = :{port} )",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise LabError(f"ss -K in {netns_name(index)}: {result.stderr.strip()}")


def leftover_namespaces() -> list[str]:
    netns = Path("/run/netns")
    return (
        sorted(p.name for p in netns.iterdir() if p.name.startswith(PREFIX))
        if netns.is_dir()
        else []
    )


def leftover_veths() -> list[str]:
    names = [p.name for p in Path("/sys/class/net").iterdir()]
    return sorted(n for n in names if n.startswith(PREFIX + "v"))


def bridge_exists() -> bool:
    return Path(f"/sys/class/net/{BRIDGE}").exists()


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {result.stderr.strip()}")
