"""HAMi's and Volcano's real device plugins on a `vgpu` lab host: each registers the planned
shares with the real kubelet and annotates its Node, `gpuprov verify --kubeconfig` (on-node
check on) agrees, and a new split count shows up in both once it reaches the plugin; until
then verify names the host."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from gpuprov_lab import vgpu_plugin_service
from test_vgpu import moved

from gpuprov.core.checks.vgpu_register import parse
from gpuprov.host.contract import VGPU_REGISTER_ANNOTATIONS, VGPU_RESOURCES

pytestmark = pytest.mark.lab

# Volcano lists one kubelet device per vgpu-memory unit, all in one ListAndWatch message, and
# the kubelet reads at most 4 MiB of it (docs/vgpu.md): 8 x 81920 MiB / 64 = 10240 units.
MEMORY_FACTOR = 64
SETTLE = 90  # s: plugin start, kubelet status report (10 s), the plugin's 30 s annotation loop


def inventory(lab, directory, host, flavour, split):
    data = {"vgpu_flavour": flavour, "vgpu_split_count": split}
    if flavour == "volcano":
        data["vgpu_memory_factor"] = MEMORY_FACTOR
    return moved(lab, directory, host, "vgpu", repr(data))


def brought(lab, tmp_path, host, flavour, split):
    """The host regrouped to vgpu with ``split``: deployed, applied to the cluster; the
    inventory and what `kube render` wrote."""
    path = inventory(lab, tmp_path / f"split{split}", host, flavour, split)
    lab.deploy(path, "--limit", host)
    lab.kube_apply(path)
    return path, lab.kube_render(path, tmp_path / f"rendered{split}")


def served(lab, host, flavour, split, gpus):
    """Wait until the kubelet shows the plugin's count for ``split``, then until the
    annotation says ``split`` for every GPU; the annotation."""
    count_name = VGPU_RESOURCES[flavour][0]
    unit = Path(vgpu_plugin_service.UNIT[flavour]).name
    # lab.nodes() keeps only nvidia.com/* resources: read the Node itself.
    deadline = time.monotonic() + SETTLE
    while allocatable(lab, host).get(count_name) != str(gpus * split):
        if time.monotonic() > deadline:
            journal = lab.run(host, f"journalctl -u {unit} --no-pager | tail -40", check=False)
            raise AssertionError(
                f"{host}: {count_name} not {gpus * split} after {SETTLE} s: "
                f"{allocatable(lab, host)}\n{unit}:\n{journal.stdout}"
            )
        time.sleep(2)
    key = VGPU_REGISTER_ANNOTATIONS[flavour]
    text = ""
    for _ in range(SETTLE // 2):
        text = vgpu_plugin_service.wait_annotation(lab, host, key, SETTLE)
        if _counts(flavour, text) == {split}:
            return text
        time.sleep(2)
    raise AssertionError(f"{host}: {key} never showed split {split}: {text}")


def allocatable(lab, host):
    got = lab.kubectl("get", "node", host, "-o", "json")
    return json.loads(got.stdout)["status"]["allocatable"] if got.returncode == 0 else {}


def _counts(flavour, text):
    return {g.count for g in parse(flavour, text)}


def verify(lab, path, host, *args):
    return lab.verify(path, "--limit", host, "--kubeconfig", str(lab.kubeconfig), *args)


@pytest.mark.parametrize("flavour", ["hami", "volcano"])
def test_the_flavours_real_plugin_registers_and_annotates_what_verify_plans(
    lab, deployed, tmp_path, flavour
):
    host = lab.in_group("shared")[0].name
    gpus = lab.host(host).count
    try:
        path, rendered = brought(lab, tmp_path, host, flavour, 4)
        vgpu_plugin_service.start(lab, host, flavour, rendered)
        before = served(lab, host, flavour, 4, gpus)
        result = verify(lab, path, host)
        assert result.returncode == 0, result.stdout + result.stderr
        (tmp_path / "annotation-split4.txt").write_text(before)

        # A new split deployed and applied, not yet in the plugin (its config volume and the
        # pod restart of a cluster): verify names the host.
        path, rendered = brought(lab, tmp_path, host, flavour, 6)
        result = verify(lab, path, host, "--format", "json")
        assert result.returncode == 1, result.stdout + result.stderr
        [report] = json.loads(result.stdout)["hosts"]
        checks = {f["check"] for f in report["findings"]}
        assert report["name"] == host and {"vgpu-register", "kube-allocatable"} <= checks, report
        assert f"1 drift ({host})" in verify(lab, path, host).stdout

        vgpu_plugin_service.start(lab, host, flavour, rendered)
        after = served(lab, host, flavour, 6, gpus)
        assert after != before
        result = verify(lab, path, host)
        assert result.returncode == 0, result.stdout + result.stderr
        have = allocatable(lab, host)
        for name, planned in lab.plan(path)[host]["vgpu"]["allocatable"].items():
            assert have[name] == str(planned), have
    finally:
        vgpu_plugin_service.stop(lab, host)
        lab.deploy(None, "--limit", host)
        lab.kube_apply(None)
