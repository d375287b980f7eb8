"""Catalog facts added for real cards (A800, H800, H800 NVL, H200 NVL), each with its source."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from gpuprov.core import catalog
from gpuprov.core.mig.solver import solve

RAW = yaml.safe_load(resources.files("gpuprov.core.catalog").joinpath("gpus.yaml").read_text())


@pytest.mark.parametrize(
    "device_id, alias",
    [
        ("0x20F310DE", "A100-80GB"),  # A800 SXM4 80GB
        ("0x20F510DE", "A100-80GB"),  # A800 80GB PCIe
        ("0x20B110DE", "A100-40GB"),  # A800 40GB family
        ("0x20F610DE", "A100-40GB"),
        ("0x232210DE", "H100-80GB"),  # H800
        ("0x232410DE", "H100-80GB"),
        ("0x232110DE", "H100-94GB"),  # H100 NVL
        ("0x233A10DE", "H100-94GB"),  # H800 NVL
        ("0x233B10DE", "H200-141GB"),  # H200 NVL
    ],
)
def test_pci_device_id_names_its_model_family(device_id, alias):
    owners = [m.alias for m in catalog.load().models.values() if device_id in m.pci_device_ids]
    assert owners == [alias]


def test_every_models_pci_ids_cite_a_defined_source():
    for alias, model in RAW["models"].items():
        if model.get("profiles"):
            assert model["pci_sources"], alias
        for key in model.get("pci_sources", []) + model.get("media_engine_sources", []):
            assert key in RAW["sources"], (alias, key)


def test_a100_40gb_two_slice_profiles_have_the_same_memory():
    model = catalog.find_model("A100-40GB")
    one, two = model.profile("1g.10gb"), model.profile("2g.10gb")
    assert one.memory_slices == two.memory_slices == 2
    assert one.memory_mib == two.memory_mib


@pytest.mark.parametrize("model", [m for m in catalog.load().models.values() if m.mig_capable])
def test_every_mig_model_allows_one_media_extension_instance_at_a_time(model):
    assert model.media_engine_sets == 1


def test_a30_refuses_two_media_extension_instances_at_once():
    a30 = catalog.find_model("A30-24GB")
    assert solve(a30, {"1g.6gb+me": 1}).fits and solve(a30, {"2g.12gb+me": 1}).fits
    both = solve(a30, {"1g.6gb+me": 1, "2g.12gb+me": 1})
    assert both.kind == "media-engines" and "+me" in both.reason


def test_every_model_says_how_it_repairs_memory_and_cites_it():
    for alias, model in RAW["models"].items():
        assert model["memory_repair"] in ("row-remapping", "page-retirement"), alias
        assert model["memory_repair_sources"], alias
        for key in model["memory_repair_sources"]:
            assert key in RAW["sources"], (alias, key)
