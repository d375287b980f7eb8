"""The vGPU plugins' register annotations, parsed as the real plugins write them and compared with
the plan (gpuprov.core.checks.vgpu_register). The fixtures in tests/data/vgpu_register/ are
annotations the real binaries wrote; its README says how each was produced."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.controller.inventory import load
from gpuprov.core.checks.vgpu_register import AnnotationError, check, parse
from gpuprov.core.plan import build
from inventories import write_inventory

DATA = Path(__file__).parent / "data" / "vgpu_register"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def test_hami_annotation_without_config_json_has_no_mode_and_index_0_left_out():
    gpus = parse("hami", fixture("hami-v2.10.0-reference-no-config-json.txt"))
    assert [(g.index, g.count, g.memory, g.cores, g.healthy, g.mode) for g in gpus] == [
        (0, 10, 81559, 100, True, ""),
        (1, 10, 81559, 100, True, ""),
    ]
    assert gpus[1].uuid == "GPU-5a1c0d2e-0000-4000-8000-000000000001"


def test_volcano_annotation_is_colon_terminated_records_without_cores():
    gpus = parse("volcano", fixture("volcano-v1.12.0-reference.txt"))
    assert [(g.uuid[-1], g.count, g.memory, g.cores, g.mode) for g in gpus] == [
        ("0", 10, 81559, None, "hami-core"),
        ("1", 10, 81559, None, "hami-core"),
    ]


@pytest.mark.parametrize(
    "flavour, text, says",
    [
        ("hami", "GPU-1,10", "not JSON"),
        ("hami", '{"id": "GPU-1"}', "not a list"),
        ("hami", '[{"count": 1}]', "no string id"),
        ("hami", '[{"id": "GPU-1", "count": "10"}]', "count '10' is not an integer"),
        ("volcano", "GPU-1,10,5120,NVIDIA-x,true,hami-core", "does not end with ':'"),
        ("volcano", "GPU-1,10,5120,true,hami-core:", "5 fields"),
        ("volcano", "GPU-1,ten,5120,NVIDIA-x,true,hami-core:", "malformed"),
    ],
)
def test_a_malformed_annotation_says_what_is_wrong(flavour, text, says):
    with pytest.raises(AnnotationError, match=says):
        parse(flavour, text)


INVENTORY = """\
    vgpu = [("hami-1", {"vgpu_flavour": "hami", "vgpu_split_count": 10}),
            ("volcano-1", {"vgpu_flavour": "volcano", "vgpu_split_count": 10,
                           "vgpu_memory_factor": 1})]
    all = (["hami-1", "volcano-1"], {"gpu_model": "H100-80GB", "gpu_count": 2})
"""


@pytest.fixture
def plans(tmp_path):
    cluster = build(load(str(write_inventory(tmp_path, INVENTORY))))
    return {p.name: p for p in cluster.hosts}


def node(key: str, text: str) -> dict:
    return {"metadata": {"annotations": {key: text}}}


def test_a_hami_plugin_without_its_node_config_is_named_per_gpu(plans):
    # The reference annotation: HAMi without config.json has no mode, and its GPUs (NVML's
    # 81559 MiB) are not the catalog's 81920.
    found = check(
        plans["hami-1"],
        node("hami.io/node-nvidia-register", fixture("hami-v2.10.0-reference-no-config-json.txt")),
        "hami-1",
    )
    uuid = "GPU-5a1c0d2e-0000-4000-8000-00000000000"
    assert [(f.gpu, f.expected, f.found) for f in found] == [
        (0, f"{uuid}0 memory: 81920", f"{uuid}0 memory: 81559"),
        (0, f"{uuid}0 mode: hami-core", f"{uuid}0 mode: "),
        (1, f"{uuid}1 memory: 81920", f"{uuid}1 memory: 81559"),
        (1, f"{uuid}1 mode: hami-core", f"{uuid}1 mode: "),
    ]
    assert all(f.check == "vgpu-register" and f.host == "hami-1" for f in found)
    assert "hami device plugin" in found[0].hint


def test_a_volcano_annotation_with_fewer_gpus_than_planned_is_named(plans):
    one = fixture("volcano-v1.12.0-reference.txt").split(":")[0] + ":"
    found = check(plans["volcano-1"], node("volcano.sh/node-vgpu-register", one), "volcano-1")
    assert ("2 GPUs in volcano.sh/node-vgpu-register", "1 GPUs") in {
        (f.expected, f.found) for f in found
    }


def test_a_duplicated_uuid_is_named(plans):
    record = fixture("volcano-v1.12.0-reference.txt").split(":")[0] + ":"
    found = check(plans["volcano-1"], node("volcano.sh/node-vgpu-register", record * 2), "v")
    assert [f.found for f in found if f.expected.startswith("one distinct")] == [
        "GPU-5a1c0d2e-0000-4000-8000-000000000000"
    ]


def test_a_malformed_annotation_is_one_finding_not_an_exception(plans):
    [finding] = check(plans["hami-1"], node("hami.io/node-nvidia-register", "[{"), "hami-1")
    assert finding.found.startswith("not JSON")


def test_hosts_outside_vgpu_have_no_annotation_check(tmp_path):
    inventory = 'whole_card = (["w-1"], {"gpu_model": "H100-80GB", "gpu_count": 2})\n'
    [plan] = build(load(str(write_inventory(tmp_path, inventory)))).hosts
    assert check(plan, {}, "w-1") == []


LAB_INVENTORY = """\
    vgpu = (["lab-a100-01"], {"gpu_model": "A100-80GB", "gpu_count": 8, "vgpu_flavour": "FLAVOUR",
                              "vgpu_split_count": SPLIT FACTOR})
"""
LAB_FIXTURES = {
    "hami": ("hami-v2.10.0-lab-a100x8-split4.txt", 1),
    "volcano": ("volcano-v1.12.0-lab-a100x8-split4-factor64.txt", 64),
}


def lab_plan(tmp_path, flavour, split):
    _, factor = LAB_FIXTURES[flavour]
    extra = f', "vgpu_memory_factor": {factor}' if flavour == "volcano" else ""
    text = LAB_INVENTORY.replace("FLAVOUR", flavour).replace("SPLIT", str(split))
    text = text.replace(" FACTOR", extra)
    [plan] = build(load(str(write_inventory(tmp_path, text)))).hosts
    return plan


@pytest.mark.parametrize("flavour", sorted(LAB_FIXTURES))
def test_what_the_lab_plugin_wrote_for_its_plan_has_no_findings(tmp_path, flavour):
    key = {"hami": "hami.io/node-nvidia-register", "volcano": "volcano.sh/node-vgpu-register"}
    text = fixture(LAB_FIXTURES[flavour][0])
    assert check(lab_plan(tmp_path, flavour, 4), node(key[flavour], text), "lab-a100-01") == []
    assert len({g.uuid for g in parse(flavour, text)}) == 8


@pytest.mark.parametrize("flavour", sorted(LAB_FIXTURES))
def test_a_split_the_lab_plugin_has_not_seen_is_named_for_every_gpu(tmp_path, flavour):
    key = {"hami": "hami.io/node-nvidia-register", "volcano": "volcano.sh/node-vgpu-register"}
    text = fixture(LAB_FIXTURES[flavour][0])
    found = check(lab_plan(tmp_path, flavour, 6), node(key[flavour], text), "lab-a100-01")
    assert sorted(f.gpu for f in found) == list(range(8))
    assert {f.expected.split(" ", 1)[1] for f in found} == {"count: 6"}
    assert {f.found.split(" ", 1)[1] for f in found} == {"count: 4"}
