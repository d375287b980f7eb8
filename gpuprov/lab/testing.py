"""The lab as pytest sees it: start it once, reach its hosts, take it down.

``tests/lab/conftest.py`` wraps this in the session fixture ``lab``; end-to-end tests elsewhere
can do the same. Hosts are addressed by name (``lab-h100-01``) through the run's ssh_config.

    lab = Lab.start()                       # `gpuprov lab up` (3 hosts), as root
    lab.run("lab-h100-01", "nvidia-smi -L").stdout
    lab.testinfra("lab-h100-01").service("kubelet").is_running
    lab.stop()
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gpuprov.lab import lifecycle, ssh
from gpuprov.lab.rundir import RunDir, default_dir
from gpuprov.lab.spec import LabHost, default_spec

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Lab:
    """A running lab: its hosts, run directory, inventory and SSH access."""

    run_dir: RunDir
    hosts: list[LabHost]
    _testinfra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def start(cls, hosts: int = 3) -> Lab:
        """`gpuprov lab up --hosts N` (reusing a running lab of the same spec)."""
        spec = default_spec(hosts)
        run_dir = RunDir(default_dir())
        lifecycle.up(run_dir, spec)
        return cls(run_dir, spec)

    def stop(self) -> None:
        """`gpuprov lab down`; fine if it is already down."""
        self._close_testinfra()
        lifecycle.down(self.run_dir)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def host(self, name: str) -> LabHost:
        return next(h for h in self.hosts if h.name == name)

    def in_group(self, group: str) -> list[LabHost]:
        return [h for h in self.hosts if h.group == group]

    @property
    def ssh_config(self) -> Path:
        return self.run_dir.ssh_config

    @property
    def inventory(self) -> Path:
        return REPO_ROOT / "inventories" / "lab.py"

    @cached_property
    def bin(self) -> Path:
        """The directory of this Python's console scripts (pyinfra, gpuprov)."""
        return Path(sys.executable).parent

    def run(
        self, host: str, command: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run a shell ``command`` on ``host`` over SSH; with ``check``, fail on non-zero exit."""
        result = ssh.run(self.run_dir, host, command, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"{host}: `{command}` exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        return result

    def testinfra(self, host: str) -> Any:
        """A testinfra host over ``paramiko://`` with the lab's ssh_config (cached per host)."""
        if host not in self._testinfra:
            import testinfra

            self._testinfra[host] = testinfra.get_host(
                f"paramiko://{host}", ssh_config=str(self.ssh_config)
            )
        return self._testinfra[host]

    def _close_testinfra(self) -> None:
        for host in self._testinfra.values():
            host.backend.client.close()
        self._testinfra.clear()
