"""The plan document (``gpuprov plan --format json``) read back into the typed plan: every example
inventory round-trips, and a wrong document is refused naming its key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.errors import InputError
from gpuprov.core.plan import build
from gpuprov.core.plan_document import read

ROOT = Path(__file__).resolve().parents[1]
INVENTORIES = sorted(p.name for p in (ROOT / "inventories").glob("*.py")) + [
    "kubespray/inventory.py"
]
# Every mode and both sharing strategies, with settings away from their defaults.
MIXED = """\
shared = (["ts", ("mps", {"sharing_strategy": "mps", "memory_per_share_gib": 10})],
          {"gpu_model": "A100-80GB", "gpu_count": 2, "time_slicing_replicas": 4})
mig = (["m"], {"gpu_model": "H100-80GB", "gpu_count": 2, "mig_layout": {"3g.40gb": 2},
       "mig_layout_by_gpu": {1: {"1g.10gb": 7}}, "kubelet_max_pods": 200})
whole_card = (["w"], {"gpu_model": "T4", "gpu_count": 1, "driver_version": "535.261.03"})
vgpu = (["v"], {"gpu_model": "A100-80GB", "gpu_count": 1, "vgpu_flavour": "hami"})
"""


def _inventory(tmp_path: Path, name: str) -> str:
    """The path of inventory ``name``: the repository's, or MIXED."""
    if name == "mixed":
        path = tmp_path / "mixed.py"
        path.write_text(MIXED)
        return str(path)
    return str(ROOT / "inventories" / name)


def _lab_key(tmp_path: Path, monkeypatch) -> None:
    """The lab inventory's signing key, in a run directory of this test's own (no lab is up)."""
    run = tmp_path / "lab"
    run.mkdir()
    (run / "repo-key.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    monkeypatch.setenv("GPUPROV_LAB_DIR", str(run))


@pytest.mark.parametrize("name", [*INVENTORIES, "mixed"])
def test_a_plan_read_back_from_its_document_is_the_same_plan(tmp_path, monkeypatch, name):
    _lab_key(tmp_path, monkeypatch)
    plan = build(load(_inventory(tmp_path, name)))
    document = json.loads(json.dumps(plan.as_dict()))
    again = read(document, "plan.json")
    assert again == plan
    assert json.loads(json.dumps(again.as_dict())) == document


def test_the_document_holds_only_resolved_values(tmp_path):
    plan = build(load(_inventory(tmp_path, "example.py")))
    for host in plan.as_dict()["hosts"]:
        assert host["settings"]["kubelet_max_pods"] == host["kubelet_max_pods"]
        assert isinstance(host["kubelet_max_pods"], int)


def _document(tmp_path) -> dict:
    return json.loads(json.dumps(build(load(_inventory(tmp_path, "mixed"))).as_dict()))


def _set(doc: dict, path: tuple, value) -> dict:
    doc = copy.deepcopy(doc)
    target = doc
    for part in path[:-1]:
        target = target[part]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    "path, value, named",
    [
        (("schema",), "gpuprov.plan/v9", "schema: must be gpuprov.plan/v1"),
        (("hosts",), {}, "hosts: must be a list"),
        (("hosts", 0, "settings", "kubelet_max_pods"), "auto", "settings.kubelet_max_pods"),
        (("hosts", 0, "settings", "time_slicing_replicas"), 1, "settings.time_slicing_replicas"),
        (("hosts", 0, "settings", "driver_version"), "latest\n", "settings.driver_version"),
        (("hosts", 0, "settings", "not_a_key"), 1, "settings.not_a_key: unknown key"),
        (("hosts", 0, "settings", "mps_root"), KeyError, "settings.mps_root: missing"),
        (("hosts", 0, "kubelet_max_pods"), 7, "hosts[0].kubelet_max_pods: must be 118"),
        (("hosts", 0, "time_slicing", "replicas"), 8, "time_slicing.replicas: must be 4"),
        (("hosts", 0, "gpus", 0, "instances"), [{"profile": 1}], "gpus[0].instances[0]"),
        (("hosts", 0, "mode"), "turbo", "hosts[0].mode: must be one of"),
        (("hosts", 2, "gpus"), [], "hosts[2].gpus: must list gpu_count (2) GPUs"),
        (("hosts", 1, "name"), "ts", "hosts[1].name: 'ts' is listed twice"),
        (("totals",), {}, "totals: must be"),
    ],
)
def test_a_wrong_document_is_refused_naming_its_key(tmp_path, path, value, named):
    with pytest.raises(InputError) as refused:
        read(_set(_document(tmp_path), path, value), "plan.json")
    assert named in str(refused.value)
    assert str(refused.value).startswith("plan.json: ")
    assert "\n" not in str(refused.value)


def test_documents_that_are_not_mappings_are_refused(tmp_path):
    for doc in (None, [], "gpuprov.plan/v1", 3):
        with pytest.raises(InputError, match="schema"):
            read(doc, "plan.json")


def test_the_cli_prints_a_document_the_reader_reads(tmp_path):
    path = _inventory(tmp_path, "mixed")
    result = CliRunner().invoke(main, ["plan", path, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert read(json.loads(result.stdout), "plan.json") == build(load(path))
