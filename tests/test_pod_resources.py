"""The kubelet's pod-resources reader (gpuprov.host.kubelet.pod_resources) against a real grpcio
server: the cases in tests/pod_resources_cases.py, run in an interpreter of their own.

A whole-suite run imports gpuprov.controller.readback, which patches threads into gevent
greenlets; grpcio's server threads then never run and the cases hang. The agent that runs the
reader on a host has no gevent either.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("pod_resources_cases.py")


def test_the_reader_against_a_real_grpc_server_in_an_interpreter_without_gevent():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=CASES.parents[1],
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "15 passed" in result.stdout.splitlines()[-1], result.stdout[-2000:]
