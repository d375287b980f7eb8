"""Every value is bounded and every deploy-time value is checked when planning (issue #11 items 2,
4, 10): a plan that passes cannot hang the planner or fail to render on a host."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from inventories import write_inventory


def plan_with(tmp_path, mode: str = "whole_card", **data):
    base = {"gpu_model": "A100-80GB", "gpu_count": 2}
    if mode == "shared":
        base["time_slicing_replicas"] = 2
    if mode == "mig":
        base["mig_layout"] = {"7g.80gb": 1}
    path = write_inventory(tmp_path, f'{mode} = (["n1"], { ({**base, **data})!r})\n')
    return path, CliRunner().invoke(main, ["plan", str(path)])


def assert_refused(result, *fragments):
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    [line] = result.stderr.splitlines()
    for fragment in fragments:
        assert fragment in line, (fragment, line)


@pytest.mark.parametrize(
    "mode, key, value, said",
    [
        ("whole_card", "gpu_count", 10**30, "gpu_count: must be an integer <= 32"),
        ("whole_card", "gpu_count", 33, "the NVIDIA driver handles at most 32 GPUs"),
        ("whole_card", "kubelet_max_pods", 2**31, "must be an integer <= 2147483647"),
        ("whole_card", "kubelet_max_pods", 0, "must be an integer >= 1, got 0"),
        ("shared", "time_slicing_replicas", 10**6, "must be an integer <= 1024"),
        ("whole_card", "drain_timeout", "999999s", "drain_timeout: must be from 1s to 86400s"),
        ("mig", "mig_layout", {"1g.10gb": 8}, "count of 1g.10gb must be <= 7"),
        ("mig", "mig_layout_by_gpu", {10**30: {}}, "GPU index must be an integer from 0 to 31"),
    ],
)
def test_numbers_past_their_bound_are_refused(tmp_path, mode, key, value, said):
    _, result = plan_with(tmp_path, mode, **{key: value})
    assert_refused(result, f"{key}:", said)


def test_largest_allowed_values_plan(tmp_path):
    plan = build(
        load(
            str(
                write_inventory(
                    tmp_path,
                    'shared = (["n1"], {"gpu_model": "T4", "gpu_count": 32, '
                    '"time_slicing_replicas": 1024, "drain_timeout": "86400s"})\n',
                )
            )
        )
    )
    assert plan.host("n1").kubelet.kubelet_max_pods == 110 + 32 * 1024


@pytest.mark.parametrize(
    "key, value, said",
    [
        (
            "driver_repo_url",
            "https://repo.example/\nTypes: deb",
            "must not hold control characters",
        ),
        ("driver_repo_url", "https://a.example/ https://b.example/", "must be one URL"),
        ("driver_repo_url", "https:///no-host", "must name a host"),
        ("container_toolkit_repo_url", "not a url", "must be one URL"),
        ("driver_repo_key", "/nonexistent/key.gpg", "file not found on this machine"),
        ("kubeconfig", "/nonexistent/kubeconfig", "file not found on this machine"),
        ("kubeconfig", "/" + "k" * 300, "File name too long"),
        ("driver_repo_key", "~nosuchuser-gpuprov/key.gpg", "cannot be looked up on this machine"),
        ("containerd_config_path", "etc/containerd/config.toml", "must be an absolute path"),
        ("kubelet_config_dir", "/etc/kubernetes/../x", "without ., .. or empty components"),
        ("device_plugin_config_path", "/etc/x\n", "must not hold control characters"),
        ("gpu_clients", ["dcgm exporter"], "must be a systemd unit name"),
        ("kube_node_name", "Node_1", "must be a Kubernetes node name"),
        ("gpuprov_python", "python3 -c evil", "a command name or path without spaces"),
        ("device_plugin_reload_command", "pkill\r-HUP x", "must not hold control characters"),
        ("driver_version", "535.261.03\n", "an upstream driver version like 535.261.03"),
        ("driver_version", "latest", "an upstream driver version like 535.261.03"),
        ("driver_version", "535.261.03-1", "an upstream driver version like 535.261.03"),
        ("container_toolkit_version", "1.17 8", "a version like 1.17.8 or 1.17.8-1"),
        ("driver_source", "ubuntu", "must be one of"),
        ("driver_repo_suite", "stable main", "one word"),
    ],
)
def test_deploy_time_values_are_checked_when_planning(tmp_path, key, value, said):
    _, result = plan_with(tmp_path, **{"driver_version": "535.261.03", key: value})
    assert_refused(result, f"{key}:", said)


def test_integer_too_long_to_print_is_refused_and_described(tmp_path):
    path = write_inventory(
        tmp_path,
        'mig = (["n1"], {"gpu_model": "A100-80GB", "gpu_count": 1, '
        '"mig_layout": {"1g.10gb": 10**5000}})\n',
    )
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert_refused(result, "count of 1g.10gb must be <= 7", "an integer of about 5001 digits")


def test_local_key_file_that_exists_passes(tmp_path):
    key = tmp_path / "nvidia.gpg"
    key.write_bytes(b"key")
    _, result = plan_with(
        tmp_path, driver_repo_url="https://repo.example/ubuntu", driver_repo_key=str(key)
    )
    assert result.exit_code == 0, result.output


def test_empty_mig_layout_is_mig_on_with_no_instances(tmp_path):
    path, result = plan_with(tmp_path, "mig", mig_layout={})
    assert result.exit_code == 0, result.output
    host = build(load(str(path))).host("n1")
    assert all(g.mig_enabled and g.instances == () for g in host.gpus)
    assert host.resources == {}
    shown = CliRunner().invoke(main, ["plan", str(path)]).stdout
    assert "GPU 0-1  MIG on, no instances" in shown


def test_none_for_one_gpu_keeps_mig_off_on_it(tmp_path):
    path, _ = plan_with(tmp_path, "mig", mig_layout_by_gpu={1: None})
    host = build(load(str(path))).host("n1")
    assert [g.mig_enabled for g in host.gpus] == [True, False]
    assert host.resources == {"nvidia.com/gpu": 1, "nvidia.com/mig-7g.80gb": 1}


@pytest.mark.parametrize(
    "key, value", [("mig_layout", {"1g.10gb": 0}), ("mig_layout_by_gpu", {0: {"1g.10gb": 0}})]
)
def test_all_zero_counts_are_refused_as_mig_parted_does(tmp_path, key, value):
    _, result = plan_with(tmp_path, "mig", **{key: value})
    assert_refused(result, f"{key}:", "every count is 0", "use {} for MIG on with no instances")


def test_two_media_extension_instances_on_an_a30_do_not_fit(tmp_path):
    _, result = plan_with(
        tmp_path,
        "mig",
        gpu_model="A30-24GB",
        gpu_count=1,
        mig_layout={"1g.6gb+me": 1, "2g.12gb+me": 1},
    )
    assert_refused(result, "mig_layout:", "A30-24GB has media engines for 1 at a time")
