"""SSH to lab hosts: the run's key and ssh_config, waiting for hosts to boot, running commands.

The lab makes its hosts, so it knows their keys: each address of the slot has its own host key,
made once per run directory, and the run's ``known_hosts`` lists it under the host's name and
address. ssh (``ssh -F ssh_config``) and pyinfra (group_data/lab.py) check host keys strictly
against that file, so a connection prints no "Permanently added" or "No host key" line, and a
host that answers with another key is refused.

>>> print(config_text(Path("/tmp/gpuprov-lab"), {"lab-a100-01": "10.200.0.11"}).splitlines()[0])
Host lab-a100-01
>>> known_hosts_line("lab-a100-01", "10.200.0.11", "ssh-ed25519 AAAAC3Nz lab-a100-01")
'lab-a100-01,10.200.0.11 ssh-ed25519 AAAAC3Nz'
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import RunDir
from gpuprov_lab.spec import SUBNET_PREFIX

HOST_KEY = "ssh_host_ed25519_key"  # sshd's name for it, in /etc/ssh


def config_text(run_path: Path, addresses: dict[str, str]) -> str:
    """An ssh_config for the lab: each host by name and by address, as root with the run's key."""
    lines = []
    for name, ip in addresses.items():
        lines += [f"Host {name}", f"  HostName {ip}", ""]
    lines += [
        f"Host {SUBNET_PREFIX}* " + " ".join(addresses),
        "  User root",
        f"  IdentityFile {run_path / 'id_ed25519'}",
        "  IdentitiesOnly yes",
        "  StrictHostKeyChecking yes",
        f"  UserKnownHostsFile {RunDir(run_path).known_hosts}",
        "  GlobalKnownHostsFile /dev/null",
        "  HostKeyAlgorithms ssh-ed25519",
        "  ConnectTimeout 3",
        "",
    ]
    return "\n".join(lines)


def keygen(path: Path, comment: str) -> None:
    """A new ed25519 key pair at ``path`` (ed25519 only: an RSA key costs ~0.6 s per host)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
    )


def known_hosts_line(name: str, ip: str, public_key: str) -> str:
    """The known_hosts line of a host: its name and address, then the key's type and data."""
    kind, data = public_key.split()[:2]
    return f"{name},{ip} {kind} {data}"


def host_key(run: RunDir, ip: str) -> Path:
    """The host key of the lab host at ``ip`` (made on first use): one per address, so a key
    stays what known_hosts says for as long as the run directory lives, whichever host a spec
    puts there."""
    key = run.host_keys / ip / HOST_KEY
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        keygen(key, ip)
    return key


def install_host_key(run: RunDir, ip: str, etc_ssh: Path) -> None:
    """Give the host at ``ip`` its key (sshd's ``/etc/ssh`` in the host's root, ``etc_ssh``)."""
    key = host_key(run, ip)
    for source, mode in ((key, 0o600), (key.with_suffix(".pub"), 0o644)):
        target = etc_ssh / source.name
        shutil.copyfile(source, target)
        target.chmod(mode)


def write_config(run: RunDir, addresses: dict[str, str]) -> None:
    """Create the run's key pair (if missing), each address's host key (if missing), the
    known_hosts that lists them and the ssh_config that trusts only that file."""
    if not run.key.exists():
        keygen(run.key, "gpuprov-lab")
    lines = [
        known_hosts_line(name, ip, host_key(run, ip).with_suffix(".pub").read_text())
        for name, ip in addresses.items()
    ]
    _write(run.known_hosts, "".join(f"{line}\n" for line in lines))
    _write(run.ssh_config, config_text(run.path, addresses))


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(text)
    os.replace(partial, path)


def argv(run: RunDir, host: str, command: str) -> list[str]:
    return ["ssh", "-F", str(run.ssh_config), "-o", "BatchMode=yes", host, command]


def run(
    run_dir: RunDir, host: str, command: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run a shell ``command`` on ``host`` (name or address); never raises on a non-zero exit."""
    return subprocess.run(
        argv(run_dir, host, command), capture_output=True, text=True, timeout=timeout
    )


def wait_booted(run_dir: RunDir, hosts: list[str], timeout: float = 90) -> dict[str, str]:
    """Wait until every host answers SSH and systemd has finished booting; host -> state.

    The state is `systemctl is-system-running` after boot: ``running``, or ``degraded`` when
    a unit failed (the caller decides whether that matters).
    """
    deadline = time.monotonic() + timeout
    pending, states = list(hosts), {}
    while pending:
        procs = {
            h: subprocess.Popen(
                argv(run_dir, h, "systemctl is-system-running --wait"),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for h in pending
        }
        for host, proc in procs.items():
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                continue
            if proc.returncode == 255:  # ssh itself failed: sshd not up yet
                continue
            states[host] = out.strip()
        pending = [h for h in pending if h not in states]
        if pending and time.monotonic() >= deadline:
            raise LabError(f"no SSH answer after {timeout:.0f} s from {', '.join(pending)}")
        if pending:
            time.sleep(0.3)
    return states
