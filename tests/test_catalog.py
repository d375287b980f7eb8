"""The catalog ships the reference facts, findable by alias and by NVML product name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuprov.core import catalog

# tests/data/mig_profiles.reference.yaml: the research notes (with their public sources) the
# catalog was compiled from.
REFERENCE = Path(__file__).parent / "data" / "mig_profiles.reference.yaml"
ALIASES = ["A100-40GB", "A100-80GB", "H100-80GB", "H100-94GB", "H200-141GB", "A30-24GB"]


@pytest.mark.parametrize("alias", ALIASES)
def test_each_mig_model_is_found_by_its_alias(alias):
    model = catalog.find_model(alias)
    assert model is not None and model.mig_capable


@pytest.mark.parametrize(
    "name, alias",
    [
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA H200", "H200-141GB"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
    ],
)
def test_models_are_found_by_nvml_product_name(name, alias):
    assert catalog.find_model(name).alias == alias


def test_non_mig_models_carry_their_memory():
    assert catalog.find_model("L40S").memory_mib == 46068
    assert not catalog.find_model("T4").mig_capable


def test_every_source_key_is_defined():
    cat = catalog.load()
    for model in cat.models.values():
        for key in model.sources:
            assert key in cat.sources
        for profile in model.profiles:
            assert profile.sources and all(k in cat.sources for k in profile.sources)


def test_h200_placements_stay_marked_unverified():
    assert not any(p.verified for p in catalog.find_model("H200-141GB").profiles)


def test_close_matches_suggest_an_alias():
    assert catalog.load().close_matches("A100-80G")[0] == "A100-80GB"


@pytest.mark.parametrize(
    "ref_name, alias",
    [
        ("A100-SXM4-40GB", "A100-40GB"),
        ("A100-80GB", "A100-80GB"),
        ("H100-80GB", "H100-80GB"),
        ("H100-94GB-NVL", "H100-94GB"),
        ("A30-24GB", "A30-24GB"),
    ],
)
def test_profiles_match_the_reference_yaml(ref_name, alias):
    ref = yaml.safe_load(REFERENCE.read_text())["gpus"][ref_name]
    model = catalog.find_model(alias)
    for raw in ref["profiles"]:
        profile = model.profile(raw["name"])
        assert profile.id == raw["nvml_profile_id"]
        assert profile.const == raw["nvml_profile_const"]["value"]
        assert profile.max_instances == raw["max_instances"]
        assert [list(p) for p in profile.placements] == raw["placements"]
