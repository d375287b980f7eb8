"""The lab network: bridge gpl-br0 (10.200.0.1/24) and one network namespace per host.

A lab in slot N (``GPUPROV_LAB_SLOT``) has bridge gplN-br0 on 10.200.N.1/24 and namespaces gplN-<index>.

Each host's namespace ``gpl-<index>`` has ``eth0``, the peer of ``gpl-v<index>`` on the bridge.
There is no forwarding: hosts reach only 10.200.0.0/24 (the lab's own services), and, as a pod's
in-cluster client does, the `kubernetes` Service's ClusterIP: the lab runs no kube-proxy, so the
controller machine does what kube-proxy would do for that one Service, a DNAT of what enters
from the slot's bridge for ``10.96.0.1:443`` to the API server's own address and port
(``add_service_nat``), in an nftables table of the slot's own (``gpuprov-lab-<slot>``: two
slots' rules never meet), deleted with the bridge. Traffic to a DNAT'ed local address is
delivered, not forwarded, so ``ip_forward`` stays off.

>>> netns_name(3), veth_name(3)
('gpl-3', 'gpl-v3')
>>> print(nat_ruleset("10.96.0.1", 443, "10.200.0.1", 16443))  # doctest: +NORMALIZE_WHITESPACE
table ip gpuprov-lab-0 {
  chain services {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "gpl-br0" ip daddr 10.96.0.1 tcp dport 443 dnat to 10.200.0.1:16443
  }
}
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from gpuprov_lab.errors import LabError
from gpuprov_lab.spec import GATEWAY, slot

# Slot 0 keeps the names it always had; slot N's names start gplN- (no prefix is another's).
PREFIX = "gpl-" if slot() == 0 else f"gpl{slot()}-"
BRIDGE = f"{PREFIX}br0"
NAT_TABLE = f"gpuprov-lab-{slot()}"  # nftables, family ip


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


def nat_ruleset(service_ip: str, service_port: int, address: str, port: int) -> str:
    """The slot's nftables table: TCP from the bridge to ``service_ip:service_port`` goes to
    ``address:port`` (kube-proxy's rule for a ClusterIP Service with one endpoint)."""
    return (
        f"table ip {NAT_TABLE} {{\n"
        "  chain services {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        f'    iifname "{BRIDGE}" ip daddr {service_ip} tcp dport {service_port} '
        f"dnat to {address}:{port}\n"
        "  }\n"
        "}"
    )


def add_service_nat(service_ip: str, service_port: int, address: str, port: int) -> None:
    """Load the slot's table (replacing one left over): hosts reach the API server at its
    Service address."""
    remove_service_nat()
    _nft("-f", "-", stdin=nat_ruleset(service_ip, service_port, address, port) + "\n")


def remove_service_nat() -> None:
    if nat_table_exists():
        _nft("delete", "table", "ip", NAT_TABLE)


def nat_table_exists() -> bool:
    if shutil.which("nft", path=_NFT_PATH) is None:
        return False  # never installed: no table either
    listed = subprocess.run(
        [_nft_program(), "list", "table", "ip", NAT_TABLE], capture_output=True, text=True
    )
    return listed.returncode == 0


def remove_all() -> None:
    """Delete every lab namespace, veth, the bridge and the slot's NAT table; wait for the
    async veth teardown."""
    remove_service_nat()
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


_NFT_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _nft_program() -> str:
    return shutil.which("nft", path=_NFT_PATH) or "nft"


def _nft(*args: str, stdin: str | None = None) -> None:
    result = subprocess.run([_nft_program(), *args], input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"nft {' '.join(args)}: {result.stderr.strip()}")
