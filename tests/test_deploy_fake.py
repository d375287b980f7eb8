"""deploys/gpu_node.py across several hosts, on pyinfra's @fake connector (nothing is touched).

The hosts answer the hardware with canned ``lspci`` lines and the probe with canned NVML state
(the GPUs by name, as nvidia-smi would show them); every other command succeeds with no output,
as on a fresh host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyinfra.context
import pytest
import tomlkit
from click.testing import CliRunner
from pyinfra_cli.main import cli

from gpuprov.core.catalog import find_model
from gpuprov.core.hostfiles.containerd import render_files
from gpuprov.core.hostfiles.documents import deep_merge, parse
from gpuprov.host import containerd_state

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = "deploys/gpu_node.py"


def probe(model: str, count: int, mig_on: tuple[int, ...] = ()) -> str:
    """The agent's probe: NVML answers, MIG on (and no instances) on the GPUs in ``mig_on``."""
    name = find_model(model).nvml_names[0]
    gpus = [
        {
            "index": i,
            "name": name,
            "mig": {"current": i in mig_on, "pending": i in mig_on},
            "gpu_instances": [],
        }
        for i in range(count)
    ]
    document = {"schema": "gpuprov.probe/v1", "nvml": "ok", "error": None, "gpus": gpus}
    return json.dumps(document, indent=2)


def host_state(node: str, hardware: list[str]) -> list[str]:
    """What the deploy's one HostState command prints (no files, packages or units yet)."""
    nvml_ok = json.loads(node)["nvml"] == "ok"
    return (
        ["@@ host:probe", *node.splitlines(), "@@ host:managed", "@@ host:hardware"]
        + ([] if nvml_ok else hardware)
        + ["@@ host:containerd", *CONTAINERD_STATE]
    )


# containerd 1.6 on Debian's default config, cut to the CRI section the deploy reads.
CONTAINERD_SOURCE = """\
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""
CONTAINERD_STATE = [
    "@@ containerd:version",
    "ok",
    "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3",
    "@@ containerd:source",
    "ok",
    *CONTAINERD_SOURCE.splitlines(),
    "@@ containerd:imports",
    "ok",
]


def candidate_dump() -> list[str]:
    """What containerd 1.6 dumps for the candidate: its drop-in's CRI table replaces the
    source's and decodes over 1.6's defaults (here the source itself: there is no main file),
    settings key by key, the ``runtimes`` map whole (tests/test_containerd_binaries.py shows
    it on the binary)."""
    state = containerd_state.parse(CONTAINERD_STATE)
    _, drop_in = render_files("/etc/containerd/config.toml", None, state, True)
    dump = parse("toml", CONTAINERD_SOURCE)
    [(plugin, section)] = parse("toml", drop_in)["plugins"].items()
    dump["plugins"][plugin] = deep_merge(dump["plugins"][plugin], section)
    dump["plugins"][plugin]["containerd"]["runtimes"] = section["containerd"]["runtimes"]
    return tomlkit.dumps(dump).splitlines()


def containerd_responses() -> dict:
    """The containerd commands of the swap: state, candidate dump, CRI rows after restart."""
    return {
        "@@ containerd:version": CONTAINERD_STATE,
        "@@ containerd:plugins": [
            "@@ containerd:plugins",
            "ok",
            "TYPE ID PLATFORMS STATUS",
            "io.containerd.grpc.v1 cri linux/amd64 ok",
        ],
        "config dump": candidate_dump(),
    }


AGENT_MISSING = json.dumps({"schema": "gpuprov.probe/v1", "nvml": "agent-missing", "gpus": []})


def lspci(device: str, count: int) -> list[str]:
    return ["@@ lspci"] + [
        f'0000:{i + 7:02x}:00.0 "0302" "10de" "{device}" -ra1 "10de" "1463"' for i in range(count)
    ]


INVENTORY = """
_fast = {{"fake_delay": 0, "fake_delay_jitter": 0}}
shared = (
    [("@fake/gpu-a100", {{**_fast, "fake_responses": {{"@@ host:probe": {a100_state},
                                                      "lspci -Dnmm": {a100},
                                                      "agent.pyz probe": {a100_probe!r},
                                                      **{containerd}}}}}),
     ("@fake/gpu-wrong", {{**_fast, "fake_responses": {{"@@ host:probe": {wrong_state},
                                                       "lspci -Dnmm": {h200}}}}})],
    {{"gpu_model": "A100-80GB", "gpu_count": 8, "time_slicing_replicas": {replicas}, {shared}}},
)
whole_card = (
    [("@fake/gpu-h200", {{**_fast, "fake_responses": {{"@@ host:probe": {h200_state},
                                                      "lspci -Dnmm": {h200},
                                                      "agent.pyz probe": {h200_probe!r},
                                                      **{containerd}}}}})],
    {{"gpu_model": "H200-141GB", "gpu_count": 4, "kubelet_config_dir": "/etc/kubernetes/kubelet.conf.d"}},
)
"""


def write_inventory(tmp_path: Path, replicas: int = 4, shared: str = "") -> Path:
    path = tmp_path / "cluster.py"
    a100_probe, h200_probe = probe("A100-80GB", 8, mig_on=(0,)), probe("H200-141GB", 4)
    path.write_text(
        INVENTORY.format(
            a100=lspci("20b2", 8),
            h200=lspci("2335", 4),
            a100_probe=a100_probe,
            h200_probe=h200_probe,
            a100_state=host_state(a100_probe, lspci("20b2", 8)),
            h200_state=host_state(h200_probe, lspci("2335", 4)),
            wrong_state=host_state(AGENT_MISSING, lspci("2335", 4)),
            replicas=replicas,
            shared=shared,
            containerd=containerd_responses(),
        )
    )
    return path


def run_deploy(inventory: Path, monkeypatch) -> tuple[int, str, dict[str, list[str]]]:
    argv = ["-y", str(inventory), DEPLOY]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["pyinfra", *argv])
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    hosts = {h.name: list(h.connector.executed_commands) for h in pyinfra.context.state.inventory}
    return result.exit_code, result.output, hosts


@pytest.fixture
def deployed(tmp_path, monkeypatch):
    """Run the deploy in-process; return (exit code, output, {host: commands it ran})."""
    return run_deploy(write_inventory(tmp_path), monkeypatch)


def test_a_host_failing_preflight_is_not_changed_and_the_others_proceed(deployed):
    code, _, commands = deployed
    assert code == 1  # pyinfra: some host failed
    # The wrong host only read its state (at prepare) and its hardware again (pre-flight op).
    assert commands["@fake/gpu-wrong"]
    assert all("lspci -Dnmm" in c for c in commands["@fake/gpu-wrong"])
    for good in ("@fake/gpu-a100", "@fake/gpu-h200"):
        assert any("99-nvidia.toml.gpuprov-tmp" in c for c in commands[good]), good


def test_mig_is_turned_off_only_where_the_probe_shows_it_on(deployed):
    _, _, commands = deployed
    mig_off = "agent.pyz apply --layout /run/gpuprov/mig-off.json"
    assert any(mig_off in c for c in commands["@fake/gpu-a100"])
    assert not any(mig_off in c for c in commands["@fake/gpu-h200"])


def test_each_mode_gets_its_own_files(deployed):
    _, _, commands = deployed
    shared = "\n".join(commands["@fake/gpu-a100"])
    whole = "\n".join(commands["@fake/gpu-h200"])
    assert "/etc/nvidia/device-plugin/config.yaml" in shared
    assert "pkill -HUP -f" in shared and "nvidia-device-plugin" in shared
    assert "/etc/kubernetes/kubelet.conf.d/.50-gpuprov.conf.gpuprov-tmp" in whole
    assert "systemctl restart kubelet.service" in whole


def test_an_mps_host_gets_its_mps_root_now_and_at_boot_and_the_overcommit_warning(
    tmp_path, monkeypatch, capsys
):
    shared = (
        '"sharing_strategy": "mps", "memory_per_share_gib": 30, "allow_memory_overcommit": True'
    )
    _, output, commands = run_deploy(write_inventory(tmp_path, shared=shared), monkeypatch)
    ran = "\n".join(commands["@fake/gpu-a100"])
    assert "/etc/tmpfiles.d/.gpuprov-mps.conf.gpuprov-tmp" in ran
    assert "systemd-tmpfiles --create /etc/tmpfiles.d/gpuprov-mps.conf" in ran
    whole = "\n".join(commands["@fake/gpu-h200"])
    assert "/run/nvidia/mps" not in whole
    assert "memory overcommitted" in output + capsys.readouterr().err


def test_an_impossible_plan_exits_2_before_any_command(tmp_path):
    inventory = write_inventory(tmp_path, replicas=1)
    deploy = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "-vv", str(inventory), DEPLOY],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    plan = subprocess.run(
        [sys.executable, "-m", "gpuprov", "plan", str(inventory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert deploy.returncode == plan.returncode == 2
    errors = [line for line in deploy.stderr.splitlines() if line.startswith("error: ")]
    assert errors == plan.stderr.splitlines()
    assert errors and all(f"{inventory}: host" in e for e in errors)
    assert ">>>" not in deploy.stdout + deploy.stderr  # -vv echoes every command it runs
    assert "Traceback" not in deploy.stdout + deploy.stderr
