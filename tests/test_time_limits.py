"""Every remote step of the deploy runs under a time limit sized for what it does.

The deploy runs in-process against pyinfra's @fake hosts of test_deploy_fake (nothing is
touched); each scheduled operation's global arguments show the limit pyinfra enforces.
"""

from __future__ import annotations

import sys

import pyinfra.context
import pytest
from click.testing import CliRunner
from pyinfra_cli.main import cli
from test_deploy_fake import DEPLOY, ROOT, write_inventory

from gpuprov.controller.deploys import progress
from gpuprov.controller.limits import APT_STALL_SECONDS


@pytest.fixture
def scheduled(tmp_path, monkeypatch):
    """{host: [(step name, its _timeout, its commands)]} of one @fake first deploy."""
    inventory = write_inventory(tmp_path)
    text = inventory.read_text()
    # Packages from a repository everywhere; one group with limits of its own.
    packages = {
        "driver_version": "535.261.03",
        "driver_source": "debian-nonfree",
        "driver_repo_url": "http://repo.invalid/non-free/",
        "container_toolkit_version": "1.17.8-1",
        "container_toolkit_repo_url": "http://repo.invalid/libnvidia-container/",
    }
    text += f"\nshared[1].update({packages!r})\nwhole_card[1].update({packages!r})\n"
    text += "whole_card[1].update(gpuprov_timeout_step=7, gpuprov_timeout_packages=11)\n"
    inventory.write_text(text)
    argv = ["-y", str(inventory), DEPLOY]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["pyinfra", *argv])
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    state = pyinfra.context.state
    out = {}
    for host in state.inventory:
        steps = []
        for op_hash in state.get_op_order():
            if op_hash not in state.ops[host]:
                continue
            data = state.get_op_data_for_host(host, op_hash)
            names = progress.step_name(state, op_hash, data.global_arguments.get("name"))
            commands = [str(c) for c in getattr(data.operation_meta, "_commands", None) or []]
            steps.append((names, data.global_arguments["_timeout"], commands))
        out[host.name] = steps
    return out, result.output


def test_every_step_of_a_first_deploy_has_a_limit(scheduled):
    steps, _ = scheduled
    ran = [s for host_steps in steps.values() for s in host_steps]
    assert len(ran) > 10
    assert [name for name, limit, _ in ran if not limit] == []


def test_package_downloads_get_longer_than_file_writes(scheduled):
    steps, _ = scheduled
    by_name = {name: limit for name, limit, _ in steps["@fake/gpu-a100"]}
    toolkit = next(v for k, v in by_name.items() if "container toolkit" in k)
    apt_update = next(v for k, v in by_name.items() if "apt-get update" in k)
    # The containerd step ends in containerd's restart (and, on failure, its rollback).
    runtime = next(v for k, v in by_name.items() if "containerd: nvidia runtime" in k)
    config = next(v for k, v in by_name.items() if "device plugin config:" in k)
    assert (toolkit, apt_update, runtime, config) == (900, 300, 300, 120)


def test_group_data_overrides_a_hosts_limits(scheduled):
    steps, _ = scheduled
    by_name = {name: limit for name, limit, _ in steps["@fake/gpu-h200"]}
    toolkit = next(v for k, v in by_name.items() if "container toolkit" in k)
    config = next(v for k, v in by_name.items() if "device plugin config:" in k)
    assert (toolkit, config) == (11, 7)


def test_apt_ends_a_stalled_download_itself_and_retries(scheduled):
    steps, _ = scheduled
    apt = [
        c
        for _, _, commands in steps["@fake/gpu-a100"]
        for c in commands
        if "apt-get" in c and ("update" in c or "install" in c)
    ]
    assert apt
    for command in apt:
        assert f"Acquire::http::Timeout={APT_STALL_SECONDS}" in command, command
        assert "Acquire::Retries=" in command, command
    updates = [c for c in apt if c.rstrip().endswith("update -q")]
    assert updates and all("APT::Update::Error-Mode=any" in c for c in updates)
