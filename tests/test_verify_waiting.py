"""`gpuprov verify` never waits forever: a hung probe is a finding within its limit, and stderr
names the hosts it is still waiting for (the JSON on stdout stays parseable)."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner
from test_verify import host  # noqa: F401  (the fixture: a MIG host on @local)

from gpuprov.cli import main


def test_a_hung_probe_is_a_finding_for_its_host_within_the_limit(host, tmp_path):  # noqa: F811
    # The interpreter the probe runs with hangs, as nvidia-smi or NVML can after an XID.
    hung = tmp_path / "hung-python"
    hung.write_text("#!/bin/sh\nsleep 60\n")
    hung.chmod(0o755)
    host.write(gpuprov_python=str(hung), gpuprov_timeout_probe=7)
    started = time.monotonic()
    result = CliRunner().invoke(main, ["verify", str(host.inventory), "--format", "json"])
    took = time.monotonic() - started
    assert result.exit_code == 1, result.output
    [report] = json.loads(result.stdout)["hosts"]
    [finding] = report["findings"]
    assert report["status"] == "unreachable"
    assert "no answer within 7 s" in finding["found"]
    assert took < 7 + 5
    assert "verify: still waiting for 1 host(s) after 5 s: @local" in result.stderr


def test_a_probe_that_answers_in_time_prints_no_waiting_line(host):  # noqa: F811
    result = CliRunner().invoke(main, ["verify", str(host.inventory), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "still waiting" not in result.stderr
    assert json.loads(result.stdout)["ok"] is True
