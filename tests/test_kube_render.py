"""`gpuprov kube render`: ConfigMap, pool labels and taints, Helm values, all from the plan.

The device plugin configs are checked by NVIDIA's real device plugin (v0.20.0, ../shared/bin):
it parses a config and prints its effective form before it needs NVML.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from click.testing import CliRunner
from upstream import upstream_binary

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.cluster.manifests import render
from gpuprov.core.cluster.nodes import node_change
from gpuprov.core.cluster.plugin_configs import host_config
from gpuprov.core.hostfiles import device_plugin as host_file
from gpuprov.core.plan import build
from inventories import write_inventory

# Every kind of device plugin config the planner makes.
INVENTORY = """\
    shared = (
        [
            "ts-1",
            "ts-2",
            ("ts-3", {"gpu_model": "T4", "gpu_count": 1, "time_slicing_replicas": 2,
                      "time_slicing_rename": False}),
            ("ts-4", {"gpu_model": "L40S", "time_slicing_replicas": 8,
                      "time_slicing_fail_requests_greater_than_one": False}),
            ("mps-1", {"sharing_strategy": "mps"}),
            ("mps-2", {"gpu_model": "H100-80GB", "sharing_strategy": "mps",
                       "time_slicing_replicas": 3, "time_slicing_rename": False,
                       "time_slicing_fail_requests_greater_than_one": False}),
        ],
        {"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": 4},
    )
    mig = (
        [
            "mig-1",
            ("mig-2", {"gpu_model": "A100-40GB", "gpu_count": 1, "mig_layout": {"1g.5gb": 7},
                       "mig_strategy": "single"}),
        ],
        {"gpu_model": "H100-80GB", "gpu_count": 2, "mig_layout": {"3g.40gb": 2}},
    )
    whole_card = (
        [("train-1", {"kube_node_name": "train-1.example"})],
        {"gpu_model": "H200-141GB", "gpu_count": 4},
    )
"""


def inventory(tmp_path) -> str:
    return str(write_inventory(tmp_path, INVENTORY))


@pytest.fixture
def cluster(tmp_path):
    return build(load(inventory(tmp_path)))


def test_one_named_config_per_kind_of_host_and_a_label_per_node(cluster):
    rendered = render(cluster, "nvidia-device-plugin")
    assert sorted(rendered.device_plugin_configs) == [
        "mig-mixed",
        "mig-single",
        "shared-mps-r3-norename-multi",
        "shared-mps-r4",
        "shared-r2-norename",
        "shared-r4",
        "shared-r8-multi",
        "whole",
    ]
    labels = {n.name: n.labels["nvidia.com/device-plugin.config"] for n in rendered.nodes}
    assert labels == {
        "ts-1": "shared-r4",
        "ts-2": "shared-r4",
        "ts-3": "shared-r2-norename",
        "ts-4": "shared-r8-multi",
        "mps-1": "shared-mps-r4",
        "mps-2": "shared-mps-r3-norename-multi",
        "mig-1": "mig-mixed",
        "mig-2": "mig-single",
        "train-1.example": "whole",
    }
    (configmap,) = rendered.files["device-plugin-configmap.yaml"][1]
    assert configmap["metadata"] == {
        "name": "gpuprov-device-plugin-configs",
        "namespace": "nvidia-device-plugin",
    }
    assert {k: yaml.safe_load(v) for k, v in configmap["data"].items()} == {
        k: c.document() for k, c in rendered.device_plugin_configs.items()
    }


def test_the_configmap_holds_what_the_host_file_holds(cluster):
    for host in cluster.hosts:
        text = host_file.render(host)
        if text is None:  # whole cards: no host file, the plugin's defaults
            assert host_config(host).document() == {
                "version": "v1",
                "flags": {"migStrategy": "none"},
            }
        else:
            assert host_config(host).document() == yaml.safe_load(text), host.name


def _effective_config(plugin, config_file) -> dict:
    """What NVIDIA's device plugin makes of ``config_file``: the JSON after
    "Running with config:", printed before it looks for NVML (and then exits)."""
    result = subprocess.run(
        [str(plugin), "--config-file", str(config_file), "--kubelet-socket", ""],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    output = result.stdout + result.stderr
    assert "Running with config:" in output, output[-2000:]
    text = output.split("Running with config:", 1)[1]
    return json.JSONDecoder().raw_decode(text.lstrip())[0]


def test_nvidia_device_plugin_accepts_every_named_config_with_the_planned_resources(
    cluster, tmp_path
):
    plugin = upstream_binary("nvidia-device-plugin")
    rendered = render(cluster, "nvidia-device-plugin")
    (configmap,) = rendered.files["device-plugin-configmap.yaml"][1]
    for node in rendered.nodes:
        name = node.labels["nvidia.com/device-plugin.config"]
        host = cluster.host(node.host)
        # The chart's volume: one file per ConfigMap key, the label picking one.
        config_file = tmp_path / name
        config_file.write_text(configmap["data"][name])
        effective = _effective_config(plugin, config_file)
        assert effective["flags"]["migStrategy"] == (host.mig_strategy or "none")
        sharing = effective.get("sharing", {})
        slicing = sharing.get("timeSlicing", {}).get("resources", [])
        if host.mode == "shared" and host.sharing.strategy == "mps":
            # Written out in full: the plugin's parse leaves nothing to its defaults.
            assert sharing["mps"]["failRequestsGreaterThanOne"] == (
                host.sharing.fail_requests_greater_than_one
            )
            assert effective["flags"]["mpsRoot"] == host.sharing.mps_root
            (resource,) = sharing["mps"]["resources"]
            advertised = resource.get("rename") or resource["name"]
            assert {advertised: resource["replicas"] * host.gpu_count} == host.resources
            assert slicing == []
        elif host.mode == "shared":
            (resource,) = slicing
            advertised = resource.get("rename") or resource["name"]
            assert {advertised: resource["replicas"] * host.gpu_count} == host.resources
        else:
            assert slicing == []


def test_pools_get_a_label_and_a_taint_by_default_and_the_daemonsets_tolerate_them(cluster):
    rendered = render(cluster, "nvidia-device-plugin")
    node = next(n for n in rendered.nodes if n.host == "mig-1")
    assert node.labels["gpuprov.io/pool"] == "mig"
    assert [str(t) for t in node.taints] == ["gpuprov.io/pool=mig:NoSchedule"]
    assert node.annotations == {
        "gpuprov.io/labels": "gpuprov.io/pool,nvidia.com/device-plugin.config",
        "gpuprov.io/taints": "gpuprov.io/pool:NoSchedule",
    }
    (chart,) = rendered.files["device-plugin-values.yaml"][1]
    (operator,) = rendered.files["gpu-operator-values.yaml"][1]
    for tolerations in (chart["tolerations"], operator["daemonsets"]["tolerations"]):
        assert {"key": "gpuprov.io/pool", "operator": "Exists"} in tolerations
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
            tolerations
        )


def test_custom_labels_and_taints_replace_the_defaults(tmp_path):
    path = write_inventory(
        tmp_path,
        """\
        whole_card = (["big-1"], {"gpu_model": "H200-141GB", "gpu_count": 8,
            "kube_node_labels": {"example.com/team": "research", "tier": "{mode}"},
            "kube_node_taints": ["example.com/dedicated=research:NoExecute", "gpu:NoSchedule"]})
        """,
    )
    (node,) = render(build(load(str(path))), "ns").nodes
    assert node.labels == {
        "example.com/team": "research",
        "tier": "whole_card",
        "nvidia.com/device-plugin.config": "whole",
    }
    assert [str(t) for t in node.taints] == [
        "example.com/dedicated=research:NoExecute",
        "gpu:NoSchedule",
    ]


def test_helm_values_follow_the_plan(tmp_path):
    path = write_inventory(
        tmp_path,
        """\
        mig = (["m-1"], {"gpu_model": "A100-80GB", "gpu_count": 1,
            "mig_layout": {"7g.80gb": 1}, "driver_version": "535.261.03"})
        """,
    )
    cluster = build(load(str(path)))
    gpuprov_mig = render(cluster, "gpu-operator")
    (operator,) = gpuprov_mig.files["gpu-operator-values.yaml"][1]
    assert operator["driver"] == {"enabled": False}  # gpuprov pins the driver
    assert "toolkit" not in operator  # container_toolkit_version unset: the operator's choice
    assert operator["migManager"] == {"enabled": False}  # gpuprov applies MIG itself
    assert operator["devicePlugin"]["config"] == {
        "create": False,
        "name": "gpuprov-device-plugin-configs",
        "default": "whole",
    }
    assert "mig-parted-configmap.yaml" not in gpuprov_mig.files
    assert "nvidia.com/mig.config" not in gpuprov_mig.nodes[0].labels

    operator_mig = render(cluster, "gpu-operator", mig_manager="operator")
    (operator,) = operator_mig.files["gpu-operator-values.yaml"][1]
    assert operator["migManager"]["enabled"] is True
    assert operator["migManager"]["config"]["name"] == "gpuprov-mig-parted-config"
    assert operator_mig.nodes[0].labels["nvidia.com/mig.config"] == "all-7g.80gb"
    assert any("cannot express placements" in w for w in operator_mig.warnings)
    (chart,) = operator_mig.files["device-plugin-values.yaml"][1]
    assert chart["config"] == {"name": "gpuprov-device-plugin-configs", "default": "whole"}


def test_mps_nodes_get_the_label_the_mps_daemon_selects_and_the_chart_their_mps_root(cluster):
    rendered = render(cluster, "nvidia-device-plugin")
    capable = {n.host for n in rendered.nodes if n.labels.get("nvidia.com/mps.capable") == "true"}
    assert capable == {"mps-1", "mps-2"}
    (chart,) = rendered.files["device-plugin-values.yaml"][1]
    (operator,) = rendered.files["gpu-operator-values.yaml"][1]
    assert chart["mps"] == operator["devicePlugin"]["mps"] == {"root": "/run/nvidia/mps"}
    # The operator's one MIG strategy (mixed, for mig-1) would reach the MPS nodes' plugin.
    assert any("refuses MPS with it" in w for w in rendered.warnings)


def test_another_mps_root_is_another_config_and_a_warning_about_the_one_chart_value(tmp_path):
    path = write_inventory(
        tmp_path,
        """\
        shared = (["a", ("b", {"mps_root": "/var/lib/nvidia-mps"})], {"gpu_model": "T4",
            "gpu_count": 1, "time_slicing_replicas": 2, "sharing_strategy": "mps"})
        """,
    )
    rendered = render(build(load(str(path))), "ns")
    names = {n.host: n.labels["nvidia.com/device-plugin.config"] for n in rendered.nodes}
    assert names["a"] == "shared-mps-r2"
    assert names["b"].startswith("shared-mps-r2-root-") and len(names["b"]) <= 63
    assert rendered.device_plugin_configs[names["b"]].mps_root == "/var/lib/nvidia-mps"
    [warning] = rendered.warnings
    assert "one mps.root" in warning and "/var/lib/nvidia-mps" in warning


def test_render_writes_files_or_one_yaml_stream(tmp_path):
    path = inventory(tmp_path)
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(main, ["kube", "render", path, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "device-plugin-configmap.yaml",
        "device-plugin-values.yaml",
        "gpu-operator-values.yaml",
        "node-taints.yaml",
        "nodes.yaml",
    ]
    nodes = list(yaml.safe_load_all((out / "nodes.yaml").read_text()))
    assert [n["metadata"]["name"] for n in nodes][-1] == "train-1.example"

    result = runner.invoke(main, ["kube", "render", path])
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.stdout))
    kinds = [d.get("kind") for d in documents]
    assert kinds.count("ConfigMap") == 1 and kinds.count("Node") == 9


def test_a_bad_taint_is_refused_naming_host_and_key(tmp_path):
    path = write_inventory(
        tmp_path,
        """\
        whole_card = (["big-1"], {"gpu_model": "T4", "gpu_count": 1,
            "kube_node_taints": ["gpuprov.io/pool=x:NoScheduleX"]})
        """,
    )
    result = CliRunner().invoke(main, ["kube", "render", str(path)])
    assert result.exit_code == 2
    assert "host big-1" in result.output and "kube_node_taints" in result.output
    assert "EFFECT one of NoSchedule, PreferNoSchedule, NoExecute" in result.output
    assert "Traceback" not in result.output


def test_a_label_the_plan_sets_cannot_be_set_by_hand(tmp_path):
    path = write_inventory(
        tmp_path,
        """\
        whole_card = (["big-1"], {"gpu_model": "T4", "gpu_count": 1,
            "kube_node_labels": {"nvidia.com/device-plugin.config": "mine"}})
        """,
    )
    result = CliRunner().invoke(main, ["kube", "render", str(path)])
    assert result.exit_code == 2
    assert "nvidia.com/device-plugin.config is set from the plan" in result.output


def test_a_node_back_from_mps_to_time_slicing_loses_the_mps_label_gpuprov_set(tmp_path):
    def node_state(strategy: str):
        path = write_inventory(
            tmp_path,
            f"""\
            shared = (["a"], {{"gpu_model": "T4", "gpu_count": 1, "time_slicing_replicas": 2,
                "sharing_strategy": "{strategy}"}})
            """,
        )
        (node,) = render(build(load(str(path))), "ns").nodes
        return node

    was = node_state("mps")
    listed = {"metadata": {"name": "a", "labels": was.labels, "annotations": was.annotations}}
    change = node_change(node_state("time-slicing"), listed)
    assert change.labels == {
        "nvidia.com/device-plugin.config": "shared-r2",
        "nvidia.com/mps.capable": None,
    }


def test_without_mig_hosts_the_operator_gets_single_so_its_plugin_keeps_mps(tmp_path):
    path = write_inventory(
        tmp_path,
        """\
        shared = (["a"], {"gpu_model": "T4", "gpu_count": 1, "time_slicing_replicas": 2,
            "sharing_strategy": "mps"})
        """,
    )
    rendered = render(build(load(str(path))), "ns")
    (operator,) = rendered.files["gpu-operator-values.yaml"][1]
    assert operator["mig"] == {"strategy": "single"}
    assert rendered.warnings == ()
