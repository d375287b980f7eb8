"""What the deploy writes, installs, holds and enables, verify reads back.

The list of what the deploy manages is taken from the deploy itself: deploys/gpu_node.py runs on
pyinfra's @fake connector for hosts that cover every mode, both runtimes, the driver's sources
with and without repositories, the fabric manager, MPS and the toolkit, and the commands it runs
say which files it puts in place (``mv -f <temp> <file>``), which packages it holds
(``apt-mark hold``) and which units it enables (``systemctl enable``). Each of them must be read
by that host's probe command, and on a host as the deploy leaves it (``tests/probes.py``),
removing or changing any one of them must be a finding that names it. A file, package or unit
added to the deploy later without a check fails here; so does a module of
``gpuprov/core/hostfiles/`` whose ``check`` verify never calls.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import json
import pkgutil
import re
import shlex
import sys
from pathlib import Path

import pyinfra.context
import pytest
from click.testing import CliRunner
from pyinfra_cli.main import cli

import gpuprov.core.hostfiles
from gpuprov.controller.inventory import load
from gpuprov.core.checks.host import compare, probe_command
from gpuprov.core.hostfiles import docker as docker_file
from gpuprov.core.packaging import planned
from gpuprov.core.plan import HostPlan, build
from gpuprov.host.contract import DOCKER_DAEMON_PATH, containerd_drop_in_path, file_record_path
from tests.probes import matching_probe
from tests.test_deploy_fake import CONTAINERD_STATE, containerd_responses

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = "deploys/gpu_node.py"
BALANCED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
KEY = (
    "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ...test...\n-----END PGP PUBLIC KEY BLOCK-----\n"
)
BASE = {
    "gpu_model": "A100-80GB",
    "gpu_count": 2,
    "kubelet_config_dir": "/etc/kubernetes/kubelet.conf.d",
}


def hosts(key: str) -> dict[str, tuple[str, dict]]:
    """Fake host -> (mode, host data): between them, everything the deploy can manage."""
    return {
        "@fake/shared-mps": (
            "shared",
            {
                **BASE,
                "time_slicing_replicas": 4,
                "sharing_strategy": "mps",
                "memory_per_share_gib": 30,
                "allow_memory_overcommit": True,
                "driver_version": "535.261.03",
                "driver_source": "debian-nonfree",
                "container_toolkit_version": "1.17.8-1",
            },
        ),
        "@fake/mig-cuda": (
            "mig",
            {
                **BASE,
                "mig_layout": BALANCED,
                "driver_version": "550.127.05",
                "driver_source": "cuda-debian",
                "driver_fabric_manager": True,
                "driver_repo_url": "http://repo.lan/cuda/",
                "driver_repo_key": key,
                "container_toolkit_version": "1.17.8",
                "container_toolkit_repo_url": "http://repo.lan/libnvidia-container/",
                "container_toolkit_repo_key": key,
            },
        ),
        "@fake/vgpu-hami": (
            "vgpu",
            {
                **BASE,
                "vgpu_flavour": "hami",
                "vgpu_split_count": 4,
                "driver_version": "535.261.03",
                "driver_source": "debian-nonfree",
            },
        ),
        "@fake/whole-docker": (
            "whole_card",
            {
                **BASE,
                "container_runtime": "docker",
                "driver_version": "535.261.03",
                "driver_source": "debian-nonfree",
                "driver_persistenced": False,
            },
        ),
    }


def madison(names: tuple[str, ...], version: str) -> list[str]:
    """``apt-cache madison`` lines: every package at the Debian version of ``version`` both of
    these sources spell ``<upstream>-1`` (persistenced on Debian: its own version)."""
    return [f"{name} | {version}-1 | http://repo.lan/ ./ Packages" for name in names]


def fake_host(plan: HostPlan) -> dict:
    """A fresh host in front of its GPUs (already as planned, so nothing is applied): no file,
    package or unit of gpuprov's yet; apt offers the planned versions."""
    probe = matching_probe(plan)
    node = json.dumps({k: v for k, v in probe.items() if k in ("schema", "nvml", "error", "gpus")})
    apt = madison(planned.driver_names(plan), plan.driver.driver_version)
    apt += ["nvidia-persistenced | 535.171.04-1~deb12u1 | http://repo.lan/ ./ Packages"]
    if plan.runtime.container_toolkit_version:
        toolkit = plan.runtime.container_toolkit_version.removesuffix("-1")
        apt += madison(planned.toolkit_packages(plan), toolkit)
    state = ["@@ host:probe", *node.splitlines(), "@@ host:managed", "@@ files", "@@ packages"]
    state += [*apt, "@@ units", "@@ host:hardware", "@@ host:containerd", *CONTAINERD_STATE]
    responses = {
        "@@ host:probe": state,
        "agent.pyz probe": node,
        # The install operation reads the packages again when it runs.
        "dpkg-query -W": apt,
        **containerd_responses(),
    }
    return {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}


def plans(tmp_path: Path) -> dict[str, HostPlan]:
    key = tmp_path / "repo-key.asc"
    key.write_text(KEY)
    inventory = tmp_path / "plans.py"
    inventory.write_text(
        "".join(
            f"{mode} = [({name!r}, {data!r})]\n" for name, (mode, data) in hosts(str(key)).items()
        )
    )
    cluster = build(load(str(inventory)))
    return {name: cluster.host(name) for name in hosts(str(key))}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> dict[str, tuple[HostPlan, list[str]]]:
    """Host -> (its plan, the commands the deploy ran on it)."""
    tmp_path = tmp_path_factory.mktemp("deploy")
    planned_hosts = plans(tmp_path)
    inventory = tmp_path / "fake.py"
    key = str(tmp_path / "repo-key.asc")
    groups: dict[str, list] = {}
    for name, (mode, data) in hosts(key).items():
        groups.setdefault(mode, []).append((name, {**data, **fake_host(planned_hosts[name])}))
    inventory.write_text("".join(f"{mode} = {entries!r}\n" for mode, entries in groups.items()))
    argv = ["-y", str(inventory), DEPLOY]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        patch.setattr(sys, "argv", ["pyinfra", *argv])
        result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    ran = {h.name: list(h.connector.executed_commands) for h in pyinfra.context.state.inventory}
    return {name: (planned_hosts[name], ran[name]) for name in planned_hosts}


def written(commands: list[str]) -> set[str]:
    """The files the deploy put in place: the atomic rename of each upload."""
    out = set()
    for command in commands:
        for match in re.finditer(r"mv -f (\S+) (\S+?);", command):
            out.add(shlex.split(match.group(2))[0])
    return out


def words_after(commands: list[str], prefix: str) -> set[str]:
    """The arguments of every ``prefix ...`` command the deploy ran (in a shell line too)."""
    out, head = set(), prefix.split()
    for command in commands:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|()"):
                if words[: len(head)] == head:
                    out.update(words[len(head) :])
                words = []
            else:
                words.append(token)
    return out


def as_deployed(plan: HostPlan) -> dict:
    """The probe document of ``plan``'s host as the deploy leaves it."""
    document = matching_probe(plan)
    if plan.runtime.container_runtime == "docker":
        document["files"][DOCKER_DAEMON_PATH] = docker_file.render(plan, None)
    return document


def probe_reads(plan: HostPlan) -> list[str]:
    return shlex.split(probe_command(plan))


def is_read(plan: HostPlan, path: str) -> bool:
    """Whether the probe command reads ``path``: named by ``--file`` or matched by ``--glob``."""
    words = probe_reads(plan)
    files = {words[n + 1] for n, w in enumerate(words) if w == "--file"}
    globs = [words[n + 1] for n, w in enumerate(words) if w == "--glob"]
    return path in files or any(fnmatch.fnmatchcase(path, g) for g in globs)


def named(findings, item: str) -> list:
    """The findings that name ``item`` in what they expected or found."""
    return [f for f in findings if item in f.expected or item in f.found]


def test_the_fake_deploy_manages_every_kind_of_thing(deployed):
    """The hosts exercise what the checks below rely on: files, packages, holds and units."""
    everything = [c for _, commands in deployed.values() for c in commands]
    assert len(written(everything)) >= 12
    assert {"nvidia-cuda-mps", "nvidia-fabricmanager-550", "nvidia-container-toolkit"} <= (
        words_after(everything, "apt-mark hold")
    )
    assert {"nvidia-persistenced.service", "nvidia-fabricmanager.service"} <= words_after(
        everything, "systemctl enable"
    )
    assert "gpuprov-mig.service" in words_after(everything, "systemctl enable")


@pytest.mark.parametrize("host", list(hosts("key")))
def test_a_host_as_the_deploy_leaves_it_verifies(deployed, host):
    plan, _ = deployed[host]
    assert compare(plan, as_deployed(plan)) == []


@pytest.mark.parametrize("host", list(hosts("key")))
def test_every_file_the_deploy_writes_is_read_and_its_loss_is_a_finding(deployed, host):
    plan, commands = deployed[host]
    files = written(commands)
    agent = plan.agent.gpuprov_agent_path
    # The agent is read back by running it: without it the probe reports "agent-missing".
    assert agent in files
    for path in sorted(files - {agent}):
        assert is_read(plan, path), f"{host}: the deploy writes {path}; verify does not read it"
        document = as_deployed(plan)
        document["files"][path] = None
        record = file_record_path(path)
        if record in document["files"]:
            document["files"][record] = None
        if path == containerd_drop_in_path(plan.runtime.containerd_config_path):
            # containerd then runs on the main file alone: that is what its dump shows.
            document["containerd"]["dump"]["text"] = WITHOUT_DROP_IN
        findings = compare(plan, document)
        assert findings, f"{host}: {path} removed, and verify says ok"
        assert all(f.host == plan.name for f in findings)


# What containerd 1.6 dumps for containerd_states.MATCHING's main file without the drop-in.
WITHOUT_DROP_IN = """\
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "native"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""
FIXED = (
    "/etc/apt/preferences.d/gpuprov-nvidia.pref",
    "/etc/modprobe.d/gpuprov-blacklist-nouveau.conf",
    "/etc/apt/sources.list.d/gpuprov-nvidia-driver.sources",
    "/etc/apt/sources.list.d/gpuprov-nvidia-container-toolkit.sources",
    "/etc/apt/keyrings/gpuprov-nvidia-driver.asc",
    "/etc/gpuprov/mig-layout.json",
    "/etc/systemd/system/gpuprov-mig.service",
)


@pytest.mark.parametrize("path", FIXED)
def test_a_file_at_a_fixed_path_removed_is_a_finding_naming_it(deployed, path):
    host = next(name for name, (_, commands) in deployed.items() if path in written(commands))
    plan, _ = deployed[host]
    document = as_deployed(plan)
    document["files"][path] = None
    findings = named(compare(plan, document), path)
    assert findings and all(f.host == host and f.found.startswith("missing") for f in findings)
    assert all(f.hint.startswith("run the deploy") for f in findings)


def test_a_mig_file_never_written_is_told_from_one_removed(deployed):
    plan, _ = deployed["@fake/mig-cuda"]
    document = as_deployed(plan)
    for path in ("/etc/gpuprov/mig-layout.json", "/etc/systemd/system/gpuprov-mig.service"):
        document["files"][path] = None
        document["files"][file_record_path(path)] = None
    findings = compare(plan, document)
    assert [(f.check, f.found) for f in findings] == [
        ("mig-layout", "missing (the deploy has not written it)"),
        ("mig-unit", "missing (the deploy has not written it)"),
    ]
    assert "reboot" in findings[0].hint and findings[0].hint.startswith("run the deploy")


@pytest.mark.parametrize("host", list(hosts("key")))
def test_every_package_the_deploy_holds_is_read_and_checked(deployed, host):
    plan, commands = deployed[host]
    held = words_after(commands, "apt-mark hold")
    assert held, host
    reads = probe_reads(plan)
    for name in sorted(held):
        assert name in reads, f"{host}: the deploy holds {name}; the probe does not read it"
        state = as_deployed(plan)["packages"][name]

        gone = as_deployed(plan)
        del gone["packages"][name]
        [finding] = named(compare(plan, gone), name)
        assert (finding.check, finding.found) == ("package", "not installed")

        unheld = as_deployed(plan)
        unheld["packages"][name]["held"] = False
        [finding] = compare(plan, unheld)
        assert (finding.check, finding.found) == (
            "package-hold",
            f"{name} {state['version']} not held",
        )

        other = as_deployed(plan)
        other["packages"][name]["version"] = "9.9.9-1"
        findings = compare(plan, other)
        if name in planned.driver_packages(plan, None)[1].own:
            assert findings == []  # of its own version: any one will do
        else:
            [finding] = findings
            assert (finding.check, finding.found) == ("package", f"{name} 9.9.9-1")
            assert finding.expected.startswith(f"{name} ") and finding.expected != f"{name} 9.9.9-1"


@pytest.mark.parametrize("host", list(hosts("key")))
def test_every_unit_the_deploy_enables_is_read_and_checked(deployed, host):
    plan, commands = deployed[host]
    enabled = words_after(commands, "systemctl enable")
    started = words_after(commands, "systemctl start")
    reads = probe_reads(plan)
    for unit in sorted(enabled):
        assert unit in reads, f"{host}: the deploy enables {unit}; the probe does not read it"
        document = as_deployed(plan)
        document["units"][unit]["enabled"] = "disabled"
        [finding] = compare(plan, document)
        assert (finding.check, finding.expected, finding.found) == (
            "unit",
            f"{unit} enabled at boot",
            f"{unit} disabled",
        )
    for unit in sorted(started):
        document = as_deployed(plan)
        document["units"][unit]["active"] = "failed"
        [finding] = compare(plan, document)
        assert (finding.check, finding.found) == ("unit", f"{unit} failed")


def test_another_branch_of_the_driver_left_installed_is_a_finding(deployed):
    plan, _ = deployed["@fake/mig-cuda"]
    document = as_deployed(plan)
    document["packages"]["nvidia-fabricmanager-535"] = {"version": "535.261.03-1", "held": True}
    [finding] = compare(plan, document)
    assert (finding.check, finding.found) == (
        "package",
        "nvidia-fabricmanager-535 535.261.03-1 installed",
    )


def test_a_probe_without_the_packages_or_units_sections_is_not_ok(deployed):
    plan, _ = deployed["@fake/shared-mps"]
    for section in ("packages", "units"):
        document = as_deployed(plan)
        del document[section]
        [finding] = compare(plan, document)
        assert finding.found == "not in the probe document"
        assert f"--{section[:-1]} " in finding.hint


def test_every_hostfiles_module_with_a_check_is_run_by_verify(deployed):
    modules = [
        importlib.import_module(f"gpuprov.core.hostfiles.{info.name}")
        for info in pkgutil.iter_modules(gpuprov.core.hostfiles.__path__)
    ]
    checks = {m.__name__: m.check.__code__ for m in modules if callable(getattr(m, "check", None))}
    assert len(checks) >= 10
    called = set()

    def profile(frame, event, arg):
        if event == "call":
            called.add(frame.f_code)

    sys.setprofile(profile)
    try:
        for plan, _ in deployed.values():
            compare(plan, as_deployed(plan))
    finally:
        sys.setprofile(None)
    assert [name for name, code in checks.items() if code not in called] == []


def test_a_changed_toolkit_version_names_the_planned_and_the_found_one(deployed):
    plan, _ = deployed["@fake/mig-cuda"]  # container_toolkit_version 1.17.8: any 1.17.8-<n>
    document = copy.deepcopy(as_deployed(plan))
    document["packages"]["nvidia-container-toolkit"]["version"] = "1.17.8-2"
    assert compare(plan, document) == []
    document["packages"]["nvidia-container-toolkit"]["version"] = "1.18.0-1"
    [finding] = compare(plan, document)
    assert (finding.expected, finding.found) == (
        "nvidia-container-toolkit 1.17.8-*",
        "nvidia-container-toolkit 1.18.0-1",
    )
