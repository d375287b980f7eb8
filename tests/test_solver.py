"""The MIG solver is exact: a layout fits iff some assignment of placements exists."""

from __future__ import annotations

from collections import Counter
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.core import catalog
from gpuprov.core.mig.solver import solve

MIG_MODELS = [m for m in catalog.load().models.values() if m.mig_capable]


@cache
def achievable_layouts(alias: str) -> frozenset[tuple[tuple[str, int], ...]]:
    """Brute force, independent of the solver: every profile multiset some set of pairwise
    non-overlapping catalog placements realises, within max counts, compute slices and the
    model's media engines (one `+me` instance at a time)."""
    model = catalog.find_model(alias)
    candidates = [(p, start, size) for p in model.profiles for start, size in p.placements]
    found: set[tuple[tuple[str, int], ...]] = set()

    def walk(i: int, used_slots: frozenset[int], chosen: list) -> None:
        if i == len(candidates):
            counts = Counter(p.name for p, _, _ in chosen)
            by_name = {p.name: p for p in model.profiles}
            if (
                all(c <= by_name[n].max_instances for n, c in counts.items())
                and sum(by_name[n].compute_slices * c for n, c in counts.items())
                <= model.compute_slices
                and sum(c for n, c in counts.items() if "+me" in n) <= model.media_engine_sets
            ):
                found.add(tuple(sorted(counts.items())))
            return
        walk(i + 1, used_slots, chosen)
        profile, start, size = candidates[i]
        slots = frozenset(range(start, start + size))
        if not slots & used_slots:
            chosen.append(candidates[i])
            walk(i + 1, used_slots | slots, chosen)
            chosen.pop()

    walk(0, frozenset(), [])
    return frozenset(found)


def assert_valid_assignment(model: catalog.GpuModel, layout: dict[str, int], fit) -> None:
    used: set[int] = set()
    for inst in fit.instances:
        profile = model.profile(inst.profile)
        assert (inst.start, inst.size) in profile.placements
        assert inst.profile_id == profile.id
        slots = set(range(inst.start, inst.start + inst.size))
        assert not slots & used, f"overlap at {slots & used}"
        used |= slots
    assert Counter(i.profile for i in fit.instances) == Counter(
        {p: c for p, c in layout.items() if c}
    )


@st.composite
def model_and_layout(draw):
    model = draw(st.sampled_from(MIG_MODELS))
    names = [p.name for p in model.profiles]
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True))
    layout = {
        n: draw(st.integers(min_value=0, max_value=model.profile(n).max_instances + 1))
        for n in chosen
    }
    return model, layout


@settings(max_examples=600, deadline=None)
@given(model_and_layout())
def test_solver_agrees_with_brute_force_on_every_model(case):
    model, layout = case
    fit = solve(model, layout)
    key = tuple(sorted((p, c) for p, c in layout.items() if c))
    assert fit.fits == (key in achievable_layouts(model.alias)), (model.alias, layout, fit)
    if fit.fits:
        assert_valid_assignment(model, layout, fit)
    else:
        assert fit.reason and fit.kind


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.alias)
def test_every_achievable_layout_is_found(model):
    for key in achievable_layouts(model.alias):
        layout = dict(key)
        fit = solve(model, layout)
        assert fit.fits, (model.alias, layout, fit.reason)
        assert_valid_assignment(model, layout, fit)


def a100():
    return catalog.find_model("A100-80GB")


def test_4g_then_3g_fits_only_with_3g_at_slot_4():
    fit = solve(a100(), {"3g.40gb": 1, "4g.40gb": 1})
    assert [(i.profile, i.start, i.size) for i in fit.instances] == [
        ("4g.40gb", 0, 4),
        ("3g.40gb", 4, 4),
    ]


def test_a100_40gb_4g_plus_3g_uses_the_same_geometry():
    fit = solve(catalog.find_model("A100-40GB"), {"4g.20gb": 1, "3g.20gb": 1})
    assert {(i.profile, i.start) for i in fit.instances} == {("4g.20gb", 0), ("3g.20gb", 4)}


def test_3g_plus_three_1g_20gb_does_not_fit():
    fit = solve(a100(), {"3g.40gb": 1, "1g.20gb": 3})
    assert not fit.fits
    assert "memory" in fit.reason


def test_3g_plus_two_2g_needs_the_3g_at_slot_4():
    fit = solve(a100(), {"3g.40gb": 1, "2g.20gb": 2})
    assert fit.fits
    assert [(i.profile, i.start) for i in fit.instances] == [
        ("2g.20gb", 0),
        ("2g.20gb", 2),
        ("3g.40gb", 4),
    ]


def test_balanced_layout_matches_the_dcgm_capture():
    # DCGM issue #138 shows 2g.20gb@0:2, 1g.10gb@2:1, 1g.10gb@3:1, 3g.40gb@4:4 on real hardware.
    fit = solve(a100(), {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    assert [(i.profile, i.start, i.size) for i in fit.instances] == [
        ("2g.20gb", 0, 2),
        ("1g.10gb", 2, 1),
        ("1g.10gb", 3, 1),
        ("3g.40gb", 4, 4),
    ]


def test_seven_1g_leave_slot_7_empty():
    fit = solve(a100(), {"1g.10gb": 7})
    assert [i.start for i in fit.instances] == list(range(7))


@pytest.mark.parametrize(
    "layout, kind",
    [
        ({"4g.40gb": 2}, "max-instances"),
        ({"1g.10gb+me": 2}, "max-instances"),
        ({"2g.20gb": 2, "1g.10gb": 4}, "compute-slices"),
        ({"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}, "compute-slices"),
        ({"7g.80gb": 1, "1g.10gb": 1}, "compute-slices"),
        ({"3g.4gb": 1}, "unknown-profile"),
    ],
)
def test_layouts_that_do_not_fit_say_why(layout, kind):
    fit = solve(a100(), layout)
    assert not fit.fits and fit.kind == kind


def test_unknown_profile_suggests_the_close_name():
    assert "3g.40gb" in solve(a100(), {"3g.4gb": 1}).reason


def test_a30_uses_its_own_ids_and_four_slots():
    fit = solve(catalog.find_model("A30-24GB"), {"2g.12gb": 1, "1g.6gb": 2})
    assert fit.fits
    assert {(i.profile, i.profile_id, i.start) for i in fit.instances} == {
        ("2g.12gb", 5, 0),
        ("1g.6gb", 14, 2),
        ("1g.6gb", 14, 3),
    }


def test_non_mig_model_refuses_any_profile():
    fit = solve(catalog.find_model("L40S"), {"1g.10gb": 1})
    assert not fit.fits and fit.kind == "unknown-profile"


def test_same_layout_always_gets_the_same_placements():
    layout = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    first = solve(a100(), layout)
    reordered = solve(a100(), dict(reversed(list(layout.items()))))
    assert first.instances == reordered.instances
