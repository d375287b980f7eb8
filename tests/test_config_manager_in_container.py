"""The node's ``nvidia.com/device-plugin.config`` label selects what the node advertises, through
NVIDIA's real ``config-manager`` (the device plugin chart's sidecar).

The host of tests/test_kubelet_in_container.py (the real kubelet, the real device plugin over
the simulated NVML, two A100s), plus config-manager as a unit beside the plugin, over a
directory holding the data of the ConfigMap ``gpuprov kube render`` makes, as the chart's volume
would. The label is set with kubectl in the real API server.

Root only. config-manager comes from ``shared/bin/config-manager.xz`` (tests/upstream.py) or,
without it, from ``kubebuild.config_manager`` (built with Go from the module proxy, cached);
without either the label tests fail saying why (here the proxy
refuses the module: docs/kubernetes.md), they never skip.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import kube_cluster
import pytest
import test_kubelet_in_container
from click.testing import CliRunner
from gpuprov_lab import base as lab_base
from gpuprov_lab import kubebuild
from gpuprov_lab import kubelet_unit as kubelet
from gpuprov_lab import plugin_service as device_plugin
from gpuprov_lab.controlplane import ControlPlane, node_identity
from gpuprov_lab.errors import LabError
from gpuprov_lab.sim.caps import mig_minors
from gpuprov_lab.sim.contract import SIM_STATE_PATH
from gpuprov_lab.sim.libnvml import admin
from gpuprov_lab.sim.libnvml import build as libnvml
from test_kubelet_in_container import (
    ADVERTISE_TIMEOUT,
    NODE,
    READY_TIMEOUT,
    Host,
    _free_port,
    _ready,
    _wait_for,
)
from upstream import shared_bin, upstream_binary

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.cluster.manifests import render
from gpuprov.core.plan import build
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIG_PATH,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
)
from inventories import write_inventory

# The container's node time-slices two A100s 4 ways; another host holds whole cards, so the
# ConfigMap has a second config to switch to.
INVENTORY = f"""\
    shared = (
        [("gpu-a", {{"kube_node_name": "{NODE}"}})],
        {{"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": 4}},
    )
    whole_card = (["gpu-b"], {{"gpu_model": "H200-141GB", "gpu_count": 2}})
"""
# The same node's host moved to whole cards (the config `whole`, also in the ConfigMap above).
MOVED = f"""\
    whole_card = ([("gpu-a", {{"kube_node_name": "{NODE}"}})], {{"gpu_model": "A100-80GB", "gpu_count": 2}})
"""
GPUS = 2
plane = test_kubelet_in_container.plane  # the same control plane fixture, one for this module
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def binary() -> Path:
    """shared/bin's config-manager (README there; CI has it), else one built with Go now.

    Neither is a failure, not a skip: the label switch must run wherever the lab tests run.
    """
    if (shared_bin() / "config-manager.xz").is_file():
        return upstream_binary("config-manager")
    try:
        return kubebuild.config_manager()
    except LabError as e:
        # The module proxy refuses NVIDIA/k8s-device-plugin (403, docs/kubernetes.md).
        pytest.fail(f"no config-manager (provide shared/bin/config-manager.xz): {e}")


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, str]:
    """The device plugin ConfigMap's data (config name -> YAML), as `gpuprov kube render` makes."""
    path = write_inventory(tmp_path_factory.mktemp("inventory"), INVENTORY)
    (config_map,) = render(build(load(str(path))), "nvidia-device-plugin").config_maps()
    return config_map["data"]


@pytest.fixture(scope="module")
def host(plane: ControlPlane, binary: Path, configs: dict[str, str]) -> Iterator[Host]:
    """The booted host: kubelet, device plugin and config-manager, the node not labelled yet."""
    base = lab_base.ensure()
    host = Host(Path(tempfile.mkdtemp(prefix="gpuprov-config-manager-test-")))
    try:
        host.mount(base)
        kubeconfig = plane.kubeconfig(host.dir / "node.kubeconfig", node_identity(NODE))
        kubelet.install(
            host.root,
            NODE,
            kubebuild.binaries()["kubelet"],
            kubeconfig,
            port=_free_port(),
            healthz_port=_free_port(),
        )
        device_plugin.install(
            host.root, upstream_binary("nvidia-device-plugin"), libnvml.library(), mig_minors(GPUS)
        )
        device_plugin.install_config_manager(
            host.root, binary, NODE, configs, DEVICE_PLUGIN_DEFAULT_CONFIG
        )
        admin.create(str(host.root / SIM_STATE_PATH.lstrip("/")), "A100-80GB", GPUS, NODE)
        # sshd would bind port 22 of this machine's network namespace.
        (host.root / "etc/systemd/system/multi-user.target.wants/ssh.service").unlink(
            missing_ok=True
        )
        started = time.monotonic()
        host.boot()
        _wait_for(plane, _ready, READY_TIMEOUT, host, "kubelet.service")
        TIMINGS["boot to Node Ready"] = time.monotonic() - started
        yield host
    finally:
        host.tear_down()
        shutil.rmtree(host.dir, ignore_errors=True)
        for name, seconds in TIMINGS.items():
            print(f"timing: {name}: {seconds:.1f} s")


def test_rendered_configmap_holds_the_two_configs_the_label_switches_between(configs):
    assert {"shared-r4", DEVICE_PLUGIN_DEFAULT_CONFIG} <= set(configs)


def test_the_node_label_selects_the_config_and_a_new_label_switches_the_allocatable(plane, host):
    # Unlabelled: --default-config, whole cards.
    _wait_for(
        plane,
        lambda n: _allocatable(n, "nvidia.com/gpu") == str(GPUS),
        ADVERTISE_TIMEOUT,
        host,
        "nvidia-device-plugin.service",
    )
    label(plane, "shared-r4")
    labelled = time.monotonic()
    node = _wait_for(
        plane,
        lambda n: _allocatable(n, "nvidia.com/gpu.shared") == str(GPUS * 4),
        ADVERTISE_TIMEOUT,
        host,
        Path(device_plugin.CONFIG_MANAGER_UNIT).name,
    )
    TIMINGS["label shared-r4 to 8 nvidia.com/gpu.shared"] = time.monotonic() - labelled
    assert _allocatable(node, "nvidia.com/gpu") in (None, "0")  # renamed: .shared only
    link = host.run("readlink", DEVICE_PLUGIN_CONFIG_PATH).stdout.strip()
    assert link == f"{device_plugin.CONFIG_DIR}/shared-r4"  # what config-manager links

    label(plane, DEVICE_PLUGIN_DEFAULT_CONFIG)
    switched = time.monotonic()
    node = _wait_for(
        plane,
        lambda n: _allocatable(n, "nvidia.com/gpu") == str(GPUS),
        ADVERTISE_TIMEOUT,
        host,
        Path(device_plugin.CONFIG_MANAGER_UNIT).name,
    )
    TIMINGS["label whole to 2 nvidia.com/gpu"] = time.monotonic() - switched
    # The replaced resource stays listed with nothing allocatable until the kubelet forgets it.
    assert _allocatable(node, "nvidia.com/gpu.shared") in (None, "0")


def test_kube_apply_moves_the_node_to_another_config_and_allocatable_follows_with_no_deploy(
    plane, host, tmp_path
):
    # The node in `shared` (shared-r4), then its host moved to `whole_card` (whole): only
    # `gpuprov kube apply` runs, nothing on the host; config-manager and the plugin follow.
    if plane.kubectl("get", "namespace", "nvidia-device-plugin").returncode != 0:
        assert plane.kubectl("create", "namespace", "nvidia-device-plugin").returncode == 0
    for step, (inventory, resource, count) in enumerate(
        [(INVENTORY, "nvidia.com/gpu.shared", GPUS * 4), (MOVED, "nvidia.com/gpu", GPUS)]
    ):
        (tmp_path / str(step)).mkdir()
        path = write_inventory(tmp_path / str(step), inventory)
        applied = CliRunner().invoke(
            main,
            ["kube", "apply", str(path), "--kubeconfig", str(plane.admin_kubeconfig)]
            + ["--limit", "gpu-a"],
        )
        assert applied.exit_code == 0, applied.output
        started = time.monotonic()
        _wait_for(
            plane,
            lambda n, r=resource, c=count: _allocatable(n, r) == str(c),
            ADVERTISE_TIMEOUT,
            host,
            Path(device_plugin.CONFIG_MANAGER_UNIT).name,
        )
        TIMINGS[f"kube apply to {count} {resource}"] = time.monotonic() - started


def label(plane: ControlPlane, config: str) -> None:
    """Set the node's config label with the admin kubeconfig, as `gpuprov kube apply` would."""
    result = plane.kubectl(
        "label", "node", NODE, f"{DEVICE_PLUGIN_CONFIG_LABEL}={config}", "--overwrite"
    )
    assert result.returncode == 0, result.stderr


def _allocatable(node: dict, resource: str) -> str | None:
    return node["status"].get("allocatable", {}).get(resource)


def test_the_node_kubeconfig_may_list_its_own_node_by_name_as_config_manager_does(plane):
    # config-manager lists and watches Nodes with fieldSelector metadata.name=<node>: the
    # kubelet's identity may, so the unit uses the kubelet's kubeconfig.
    name = f"{NODE}-own"
    kube_cluster.node(plane, name)
    node_config = plane.kubeconfig(plane.dir / "own.kubeconfig", node_identity(name))
    result = plane.kubectl(
        "get",
        "nodes",
        f"--field-selector=metadata.name={name}",
        "-o",
        "json",
        kubeconfig=node_config,
    )
    assert result.returncode == 0, result.stderr
    assert [n["metadata"]["name"] for n in json.loads(result.stdout)["items"]] == [name]
