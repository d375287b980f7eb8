"""A step that runs out of time, or fails, fails its host with the step, its limit, its command
and what the command said named.

Real pyinfra runs on @local: one step runs `sleep 5` under a 1 s limit; one fails with a message.
"""

from __future__ import annotations

import sys

from click.testing import CliRunner
from pyinfra_cli.main import cli

DEPLOY = """
from pyinfra import state
from pyinfra.operations import server

from gpuprov.controller.deploys import progress

progress.watch(state)
server.shell(name="hung step", commands=["sleep 5"], _timeout=1)
server.shell(name="after it", commands=["true"])
"""


def run(tmp_path, monkeypatch, text: str) -> str:
    """pyinfra's CLI on @local with the deploy ``text``, which fails: its output."""
    deploy = tmp_path / "deploy.py"
    deploy.write_text(text)
    argv = ["-y", "@local", str(deploy)]
    monkeypatch.setattr(sys, "argv", ["pyinfra", *argv])
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    return result.output


def test_a_step_past_its_limit_fails_its_host_naming_step_limit_and_command(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, DEPLOY)
    assert "[@local] Command timed out after 1s" in out
    assert "gpuprov: step `hung step` ran out of time after 1 s (limit 1 s)" in out
    # pyinfra's CLI adds a log handler per run, so earlier in-process runs repeat each line.
    [row] = {line for line in out.splitlines() if line.startswith("    @local")}
    assert "(limit 1 s)  hung step  FAILED: `sleep 5`" in row
    assert "after it" not in row


FAILING = """
from pyinfra import state
from pyinfra.operations import server

from gpuprov.controller.deploys import progress

progress.watch(state)
server.shell(
    name="broken restart",
    commands=["echo 'Job for x.service failed.' >&2; echo 'log line' >&2; exit 1"],
    _timeout=30,
)
"""


def test_a_failed_step_names_the_first_line_its_command_wrote_to_stderr(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, FAILING)
    [row] = {line for line in out.splitlines() if line.startswith("    @local")}
    assert "(limit 30 s)  broken restart  FAILED: `" in row
    assert row.endswith("exit 1`: Job for x.service failed.")
