"""SSH to lab hosts: the run's key and ssh_config, waiting for hosts to boot, running commands.

Host keys are new on every `up` while names and addresses repeat, so host key checking is off
(the lab is on a private bridge of this machine).

>>> print(config_text(Path("/tmp/gpuprov-lab"), {"lab-a100-01": "10.200.0.11"}).splitlines()[0])
Host lab-a100-01
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import RunDir
from gpuprov_lab.spec import SUBNET_PREFIX


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
        "  StrictHostKeyChecking no",
        "  UserKnownHostsFile /dev/null",
        "  LogLevel ERROR",
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


def write_config(run: RunDir, addresses: dict[str, str]) -> None:
    """Create the run's key pair (if missing) and ssh_config."""
    if not run.key.exists():
        keygen(run.key, "gpuprov-lab")
    run.ssh_config.write_text(config_text(run.path, addresses))


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
