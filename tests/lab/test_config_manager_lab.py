"""The label switch through NVIDIA's real config-manager, on the lab: the chart's mode.

Every lab host runs config-manager beside its device plugin as the device plugin chart does
(lab/gpuprov_lab/config_manager_service.py): the init step once before the plugin, the sidecar
after it, the source directory the device plugin ConfigMap read from the API server. Then only
`gpuprov kube apply` runs, no deploy: it moves the shared host's `nvidia.com/device-plugin.config`
label to `whole` and back, and the Node's allocatable follows.

config-manager's `--oneshot` is run too, on a labelled node: it never takes the label (it links
the default), which is why the chart's init container is only a first config
(docs/kubernetes.md, "Oneshot never sees the label").
"""

from __future__ import annotations

import json
import time

import pytest
from gpuprov_lab import config_manager_service as chart
from gpuprov_lab import plugin_service

from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIG_PATH,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
)

pytestmark = pytest.mark.lab

HOST = "lab-a100-01"  # inventories/lab.py's shared host: 8 A100s x 4, config `shared-r4`
SHARED_CONFIG = "shared-r4"
# A label change reaches the Node through config-manager's watch, the plugin's restart on SIGHUP
# and the kubelet's next status report (10 s): two reports' worth.
SWITCH_BOUND = 30.0
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def chart_mode(lab, deployed):
    lab.kube_apply()
    lab.wait_planned_allocatable(60, "the lab's plan before the chart mode")
    chart.start(lab)
    try:
        yield
    finally:
        chart.stop(lab)
        lab.kube_apply()
        lab.wait_planned_allocatable(90, "the lab's plan after the chart mode")
        for name, seconds in TIMINGS.items():
            print(f"timing: {name}: {seconds:.1f} s")


def label(lab, host: str) -> str | None:
    got = lab.kubectl("get", "node", host, "-o", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)["metadata"].get("labels", {}).get(DEVICE_PLUGIN_CONFIG_LABEL)


def link(lab, host: str) -> str:
    return lab.run(host, f"readlink {DEVICE_PLUGIN_CONFIG_PATH}").stdout.strip()


def test_every_host_takes_its_labelled_config_from_config_manager(lab, chart_mode):
    started = time.monotonic()
    lab.wait_planned_allocatable(60, "every host's planned allocatable under config-manager")
    TIMINGS["chart mode to the planned allocatable"] = time.monotonic() - started
    for host in lab.names:
        # The deploy's file is aside: what the plugin reads is config-manager's symlink.
        assert link(lab, host) == f"{plugin_service.CONFIG_DIR}/{label(lab, host)}"
    assert label(lab, HOST) == SHARED_CONFIG


def test_kube_apply_alone_moves_the_shared_host_to_whole_cards_and_back(lab, chart_mode, tmp_path):
    moved = lab.inventory_copy(
        tmp_path,
        inventory_code=(
            f"\n# {HOST} moved from shared to whole_card.\n"
            f"whole_card = (whole_card[0] + [h for h in shared[0] if h[0] == {HOST!r}], "
            "whole_card[1])\n"
            f"shared = ([h for h in shared[0] if h[0] != {HOST!r}], shared[1])\n"
        ),
    )
    gpus = lab.host(HOST).count
    lab.kube_apply(moved)
    assert label(lab, HOST) == DEVICE_PLUGIN_DEFAULT_CONFIG
    started = time.monotonic()
    lab.wait_nodes(
        lambda nodes: nodes[HOST]["allocatable"].get("nvidia.com/gpu") == str(gpus),
        SWITCH_BOUND,
        f"{gpus} whole cards on {HOST} after its label moved to whole",
    )
    TIMINGS["kube apply (whole) to 8 nvidia.com/gpu"] = time.monotonic() - started
    assert link(lab, HOST) == f"{plugin_service.CONFIG_DIR}/{DEVICE_PLUGIN_DEFAULT_CONFIG}"
    # The renamed resource is still listed, with nothing allocatable.
    assert lab.nodes()[HOST]["allocatable"].get("nvidia.com/gpu.shared") in (None, "0")

    lab.kube_apply()
    started = time.monotonic()
    lab.wait_nodes(
        lambda nodes: nodes[HOST]["allocatable"].get("nvidia.com/gpu.shared") == str(gpus * 4),
        SWITCH_BOUND,
        f"{gpus * 4} shares on {HOST} after its label moved back to {SHARED_CONFIG}",
    )
    TIMINGS["kube apply (shared-r4) to 32 nvidia.com/gpu.shared"] = time.monotonic() - started
    assert link(lab, HOST) == f"{plugin_service.CONFIG_DIR}/{SHARED_CONFIG}"


def test_oneshot_links_the_default_whatever_the_label_says(lab, chart_mode):
    assert label(lab, HOST) == SHARED_CONFIG
    scratch = "/tmp/gpuprov-oneshot/config.yaml"
    command = plugin_service.config_manager_command(HOST, DEVICE_PLUGIN_DEFAULT_CONFIG).replace(
        f"--config-file-dst={DEVICE_PLUGIN_CONFIG_PATH}", f"--config-file-dst={scratch}"
    )
    lab.run(
        HOST, f"mkdir -p {scratch.rsplit('/', 1)[0]} && {command} --oneshot --send-signal=false"
    )
    # The node says shared-r4; oneshot's only pass ran before its informer listed the Node.
    assert lab.run(HOST, f"readlink {scratch}").stdout.strip() == (
        f"{plugin_service.CONFIG_DIR}/{DEVICE_PLUGIN_DEFAULT_CONFIG}"
    )
