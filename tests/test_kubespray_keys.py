"""Keys gpuprov shares with Kubespray take only values Kubespray accepts (issue #26 item 3).

Each shared key is rendered the way Kubespray renders it (its own template expression, with
jinja2, as Ansible does) and the result is read the way its consumer reads it: the kubelet's
``maxPods`` as YAML into an int32, ``drain_timeout`` by kubectl's own flag parsing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from click.testing import CliRunner
from gpuprov_lab import kubebuild
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from gpuprov.core.variables import KUBESPRAY_KEYS, VARIABLES

ROOT = Path(__file__).resolve().parents[1]
KUBESPRAY = ROOT / "inventories" / "kubespray"

# Kubespray's own expressions (kubernetes-sigs/kubespray):
# roles/kubernetes/node/templates/kubelet-config.v1beta1.yaml.j2 l.27 (at 044dcbae)
MAX_PODS = "maxPods: {{ kubelet_max_pods }}"
# roles/upgrade/pre-upgrade/tasks/main.yml l.77 (at 02e18bcd), in its `kubectl drain` command
DRAIN_TIMEOUT = "--timeout {{ drain_timeout }}"
INT32_MAX = 2**31 - 1


def rendered(expression: str, **values) -> str:
    return jinja2.Template(expression, undefined=jinja2.StrictUndefined).render(**values)


def max_pods_as_the_kubelet_reads_it(text: str) -> int:
    """The kubelet's ``maxPods`` from a rendered KubeletConfiguration line: an int32 or an
    error (the kubelet decodes the field into an int32)."""
    value = yaml.safe_load(text)["maxPods"]
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value <= INT32_MAX:
        raise ValueError(f"maxPods: {value!r} is not an int32")
    return value


def kubectl() -> str:
    built = kubebuild.binaries()["kubectl"]
    found = str(built) if built.is_file() else shutil.which("kubectl")
    if not found:
        pytest.skip("needs kubectl: build the lab's Kubernetes with `gpuprov lab up`")
    return found


def kubectl_refuses_flags(args: list[str]) -> str | None:
    """kubectl's own complaint about ``args`` of ``kubectl drain``, or None when it took them
    (and went on to a server that is not there)."""
    result = subprocess.run(
        [kubectl(), "drain", "gpu-1", *args, "--kubeconfig", "/dev/null"]
        + ["--server", "http://127.0.0.1:9", "--request-timeout", "1s"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert result.returncode != 0, result
    said = result.stderr.strip().splitlines()
    return said[0] if said and "invalid argument" in said[0] else None


def example_values(key: str) -> dict[str, object]:
    """Host -> the value of ``key`` that Kubespray sees for it in the bundled example."""
    inventory = load(str(KUBESPRAY / "inventory.py"))
    return {h.name: h.data[key] for h in inventory.hosts if key in h.data}


def test_every_key_documented_as_kubesprays_is_checked_here():
    documented = {n for n, v in VARIABLES.items() if v.doc.startswith("Kubespray's key")}
    assert documented == set(KUBESPRAY_KEYS) == {"kubelet_max_pods", "drain_timeout"}


def test_the_examples_kubelet_max_pods_renders_into_an_int32_for_every_host():
    values = example_values("kubelet_max_pods")
    # Kubespray's k8s_cluster group sets it, so every node of the cluster has it.
    assert set(values) == {"cp-01", "gpu-h100-01", "gpu-h100-02", "gpu-l40s-01"}
    for host, value in values.items():
        assert max_pods_as_the_kubelet_reads_it(rendered(MAX_PODS, kubelet_max_pods=value)) == (
            VARIABLES["kubelet_max_pods"].check(value)
        ), host


def test_auto_rendered_by_kubespray_is_no_maxpods_the_kubelet_reads():
    with pytest.raises(ValueError, match="'auto' is not an int32"):
        max_pods_as_the_kubelet_reads_it(rendered(MAX_PODS, kubelet_max_pods="auto"))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(), st.text(max_size=8), st.booleans(), st.floats()))
def test_every_kubelet_max_pods_gpuprov_accepts_renders_into_the_same_int32(value):
    try:
        accepted = VARIABLES["kubelet_max_pods"].check(value)
    except ValueError:
        return
    assert max_pods_as_the_kubelet_reads_it(rendered(MAX_PODS, kubelet_max_pods=value)) == accepted


def test_auto_lives_under_gpuprovs_own_key_in_the_example():
    plan = build(load(str(KUBESPRAY / "inventory.py")))
    # 4 L40S x 4 time-slicing replicas on top of the kubelet's 110.
    assert plan.host("gpu-l40s-01").kubelet.kubelet_max_pods == 110 + 16
    assert plan.host("gpu-h100-01").kubelet.kubelet_max_pods == 110


def _example_with(tmp_path: Path, group: str, line: str) -> Path:
    copy = tmp_path / "kubespray"
    shutil.copytree(KUBESPRAY, copy)
    with (copy / "group_data" / f"{group}.py").open("a") as f:
        f.write(line + "\n")
    return copy / "inventory.py"


def test_kubelet_max_pods_auto_is_refused_at_plan_time_naming_file_group_key_and_kubespray(
    tmp_path,
):
    path = _example_with(tmp_path, "shared", 'kubelet_max_pods = "auto"')
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    for fragment in (
        str(path),
        "group shared, group_data/shared.py",
        "kubelet_max_pods:",
        "Kubespray",
        'set gpuprov_kubelet_max_pods = "auto" instead',
    ):
        assert fragment in line, (fragment, line)


def test_gpuprovs_own_key_wins_over_kubesprays(tmp_path):
    path = _example_with(tmp_path, "mig", "gpuprov_kubelet_max_pods = 300")
    plan = build(load(str(path)))
    assert plan.host("gpu-h100-01").kubelet.kubelet_max_pods == 300
    assert plan.host("gpu-l40s-01").kubelet.kubelet_max_pods == 126


@pytest.mark.parametrize("value", ["300s", "5m", "1h30m", "86400s"])
def test_every_drain_timeout_gpuprov_accepts_is_one_kubectl_takes(value):
    VARIABLES["drain_timeout"].check(value)
    assert kubectl_refuses_flags(rendered(DRAIN_TIMEOUT, drain_timeout=value).split()) is None


def test_a_drain_timeout_without_a_unit_is_refused_by_gpuprov_as_kubectl_refuses_it(tmp_path):
    said = kubectl_refuses_flags(rendered(DRAIN_TIMEOUT, drain_timeout=300).split())
    assert said is not None and "missing unit" in said
    path = _example_with(tmp_path, "all", "drain_timeout = 300")
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "group_data/all.py" in line and "drain_timeout:" in line and "Kubespray" in line
    assert 'write "300s"' in line


def test_kubesprays_own_drain_timeout_default_plans(tmp_path):
    # roles/upgrade/pre-upgrade/defaults/main.yml l.3: `drain_timeout: 360s`
    path = _example_with(tmp_path, "all", 'drain_timeout = "360s"')
    plan = build(load(str(path)))
    assert plan.host("gpu-h100-01").node.drain_timeout == 360
