"""No run hangs on the lab: a stuck mirror, a cut link and a hung probe each fail their host,
named and in bounded time, while the other hosts finish; a rerun converges."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from gpuprov_lab import network
from gpuprov_lab.services import stuck_url
from gpuprov_lab.testing import REPO_ROOT

from gpuprov.controller.keepalive import interval

pytestmark = pytest.mark.lab

KUBELET_DROP_IN = "/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf"
PLUGIN_CONFIG = "/etc/nvidia/device-plugin/config.yaml"  # a shared host without it drifts
APT_UPDATE_STEP = "GPU node | NVIDIA driver | apt-get update (gpuprov-nvidia-driver)"
APT_UPDATE_LIMIT = 300  # gpuprov_timeout_apt_update's default


def timed_deploy(lab, inventory, on_start=None) -> tuple[int, list[tuple[float, str]]]:
    """Run the deploy, each output line with the seconds since the operations began; calls
    ``on_start`` when they begin."""
    deploy = subprocess.Popen(
        lab.deploy_argv(inventory),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # each line as it happens
    )
    began, lines = None, []
    for line in deploy.stdout:
        if began is None and "Beginning operation run" in line:
            began = time.monotonic()
            if on_start:
                on_start()
        lines.append((time.monotonic() - began if began else 0.0, line))
    return deploy.wait(timeout=600), lines


def give_every_host_work(lab) -> None:
    """Config files to write again (and the kubelet to restart) on every host."""
    for host in lab.names:
        lab.run(host, f"rm -f {KUBELET_DROP_IN} {PLUGIN_CONFIG}")


def has_drop_in(lab, host: str) -> bool:
    return lab.run(host, f"test -f {KUBELET_DROP_IN}", check=False).returncode == 0


def test_a_stuck_mirror_fails_its_host_at_the_step_the_others_finish_and_a_rerun_converges(
    lab, deployed, tmp_path
):
    stuck = lab.in_group("shared")[0].name
    inventory = lab.inventory_copy(
        tmp_path,
        inventory_code=(
            "\nfor _name, _data in shared[0]:\n"
            f"    if _name == {stuck!r}:\n"
            f"        _data['driver_repo_url'] = {stuck_url('cuda')!r}\n"
        ),
    )
    give_every_host_work(lab)

    code, lines = timed_deploy(lab, inventory)
    text = "".join(line for _, line in lines)
    print(text[text.find("--> gpuprov: slow and failed steps") :])
    assert code != 0, text[-4000:]
    failed = re.search(
        rf"\[{stuck}\]\s+gpuprov: step `{re.escape(APT_UPDATE_STEP)}` failed after (\d+) s "
        rf"\(limit {APT_UPDATE_LIMIT} s\)",
        text,
    )
    assert failed, text[-4000:]
    assert int(failed.group(1)) < APT_UPDATE_LIMIT
    # apt's own stall limit ended it, naming the mirror.
    assert f"Failed to fetch {stuck_url('cuda')}InRelease" in text, text[-4000:]
    for host in lab.names:
        assert has_drop_in(lab, host) == (host != stuck), host
    assert lab.verify_status() == {h: "drift" if h == stuck else "ok" for h in lab.names}

    lab.deploy()
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_host_whose_link_is_cut_mid_deploy_fails_within_the_keepalive_limit(
    lab, deployed, tmp_path
):
    cut = lab.in_group("shared")[0]
    dead_after = 9
    inventory = lab.inventory_copy(
        tmp_path, group_data_code=f"\ngpuprov_ssh_dead_after = {dead_after}\n"
    )
    give_every_host_work(lab)
    try:
        code, lines = timed_deploy(
            lab, inventory, on_start=lambda: network.set_link(cut.index, up=False)
        )
    finally:
        network.set_link(cut.index, up=True)
    text = "".join(line for _, line in lines)
    print(text[text.find("--> gpuprov: slow and failed steps") :])
    assert code != 0, text[-4000:]
    lost = [
        (seconds, line)
        for seconds, line in lines
        if f"[{cut.name}]" in line and "the host stopped answering" in line
    ]
    assert lost, text[-4000:]
    # Failed within the keepalive limit (a keepalive interval + dead_after), plus scheduling.
    assert lost[0][0] <= dead_after + interval(dead_after) + 5, lost[0]
    for host in lab.names:
        if host != cut.name:
            assert has_drop_in(lab, host), host

    lab.deploy()
    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_hung_probe_fails_verify_for_its_host_within_the_limit_not_the_report(
    lab, deployed, tmp_path
):
    hung = lab.in_group("mig")[0].name
    limit = 8
    inventory = lab.inventory_copy(tmp_path, group_data_code=f"\ngpuprov_timeout_probe = {limit}\n")
    # The probe runs `python3 AGENT probe`: a python3 ahead on PATH that sleeps past the limit.
    wrapper = "/usr/local/bin/python3"
    lab.run(hung, f"printf '#!/bin/sh\\nsleep 120\\n' > {wrapper} && chmod 755 {wrapper}")
    try:
        started = time.monotonic()
        result = lab.verify(inventory, "--format", "json")
        took = time.monotonic() - started
    finally:
        lab.run(hung, f"rm -f {wrapper}")
    report = json.loads(result.stdout)
    status = {h["name"]: h["status"] for h in report["hosts"]}
    assert status == {h: "unreachable" if h == hung else "ok" for h in lab.names}
    [finding] = next(h["findings"] for h in report["hosts"] if h["name"] == hung)
    assert f"no answer within {limit} s" in finding["found"]
    assert result.returncode == 1
    assert took < limit + 10, took
    assert f"still waiting for 1 host(s) after 5 s: {hung}" in result.stderr
