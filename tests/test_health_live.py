"""Live `gpuprov verify` on @local (the agent over SSH-less pyinfra, the simulated driver below
it): health rides in the one probe command per host, and an unhealthy GPU fails the host."""

from __future__ import annotations

import json

from click.testing import CliRunner
from pyinfra.connectors.local import LocalConnector
from simulated import run_program
from test_verify import host  # noqa: F401 - the simulated MIG host fixture

from gpuprov.cli import main


def test_health_is_read_in_the_one_probe_command_and_fails_the_host(host, monkeypatch):  # noqa: F811
    commands: list[str] = []
    original = LocalConnector.run_shell_command

    def counted(self, command, *args, **kwargs):
        commands.append(str(command))
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(LocalConnector, "run_shell_command", counted)
    assert (
        run_program(
            "gpuprov-sim",
            ["--state", str(host.state), "set-ecc", "--gpu", "1", "--uncorrected", "2"],
        )
        == 0
    )
    result = CliRunner().invoke(main, ["verify", str(host.inventory), "--format", "json"])
    assert result.exit_code == 1, result.output
    [report] = json.loads(result.stdout)["hosts"]
    assert [(f["gpu"], f["check"]) for f in report["findings"]] == [(1, "ecc")]
    assert len(commands) == 1 and "--health" in commands[0]
    # The host's critical XIDs ride along, so the probe never caps one away.
    assert "--critical-xids 48,64,74,75,79,95,119,120,140" in commands[0]

    commands.clear()
    off = CliRunner().invoke(main, ["verify", str(host.inventory), "--health", "off"])
    assert off.exit_code == 0, off.output
    assert len(commands) == 1 and "--health" not in commands[0]
