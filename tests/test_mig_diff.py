"""The MIG diff: planned GPU vs observed GPU -> keep / destroy / create / mode / reset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.core.catalog import find_model
from gpuprov.core.mig.solver import solve
from gpuprov.core.plan import GpuPlan
from gpuprov.host.mig.diff import MigDiffError, diff
from gpuprov.host.mig.instance import Instance

A100 = find_model("A100-80GB")


def planned(*instances: tuple[str, int], mig: bool = True) -> dict:
    """A mig-layout.json GPU from (profile, start) pairs on an A100-80GB."""
    out = []
    for name, start in instances:
        p = A100.profile(name)
        size = next(z for s, z in p.placements if s == start)
        out.append({"profile": name, "profile_id": p.id, "start": start, "size": size})
    return {"index": 0, "mig_enabled": mig, "instances": out}


def gi(gi_id: int, name: str, start: int, cis: tuple[int, ...] | None = None) -> dict:
    """An observed GI; by default with its one full CI."""
    p = A100.profile(name)
    size = next(z for s, z in p.placements if s == start)
    slices = (p.compute_slices,) if cis is None else cis
    return {
        "id": gi_id,
        "profile_id": p.id,
        "profile": name,
        "start": start,
        "size": size,
        "compute_instances": [
            {"id": n, "profile_id": 0, "slice_count": c} for n, c in enumerate(slices)
        ],
    }


def observed(*gis: dict, current: bool = True, pending: bool | None = None) -> dict:
    return {
        "index": 0,
        "mig": {"current": current, "pending": current if pending is None else pending},
        "gpu_instances": list(gis),
    }


def test_matching_layout_yields_no_action_at_all():
    actions = diff(
        planned(("4g.40gb", 0), ("3g.40gb", 4)), observed(gi(7, "3g.40gb", 4), gi(2, "4g.40gb", 0))
    )
    assert not actions.changes
    assert [g.id for g in actions.keep] == [2, 7]
    assert (actions.mig_mode, actions.reset, actions.destroy, actions.create) == (
        None,
        False,
        (),
        (),
    )


def test_same_profile_at_the_wrong_placement_is_destroyed_and_recreated_at_the_right_one():
    # Same profile counts (2 x 2g + 3g), but one 2g sits at 4 where the plan puts the 3g.
    actions = diff(
        planned(("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)),
        observed(gi(1, "2g.20gb", 0), gi(2, "2g.20gb", 4)),
    )
    assert [g.id for g in actions.keep] == [1]
    assert [g.id for g in actions.destroy] == [2]
    assert [(t.profile, t.start) for t in actions.create] == [("3g.40gb", 4), ("2g.20gb", 2)]


def test_gi_left_without_its_compute_instance_is_destroyed():
    actions = diff(planned(("3g.40gb", 4)), observed(gi(1, "3g.40gb", 4, cis=())))
    assert [g.id for g in actions.destroy] == [1]
    assert [t.start for t in actions.create] == [4]


@pytest.mark.parametrize("cis", [(1,), (1, 1), (3, 3)], ids=["partial", "two-partial", "two"])
def test_gi_without_exactly_one_full_compute_instance_is_destroyed(cis):
    actions = diff(planned(("3g.40gb", 4)), observed(gi(1, "3g.40gb", 4, cis=cis)))
    assert [g.id for g in actions.destroy] == [1] and not actions.keep


def test_a_planned_instance_is_matched_once_even_if_the_profile_repeats():
    actions = diff(
        planned(("1g.10gb", 0), ("1g.10gb", 1)), observed(gi(5, "1g.10gb", 1), gi(6, "1g.10gb", 3))
    )
    assert [g.id for g in actions.keep] == [5]
    assert [g.id for g in actions.destroy] == [6]
    assert [t.start for t in actions.create] == [0]


def test_fresh_mig_disabled_gpu_sets_the_mode_needs_a_reset_and_creates_largest_first():
    actions = diff(planned(("1g.10gb", 6), ("2g.20gb", 4), ("4g.40gb", 0)), observed(current=False))
    assert actions.mig_mode is True and actions.reset
    assert [(t.profile, t.start) for t in actions.create] == [
        ("4g.40gb", 0),
        ("2g.20gb", 4),
        ("1g.10gb", 6),
    ]


def test_mode_already_pending_needs_only_the_reset():
    actions = diff(planned(("7g.80gb", 0)), observed(current=False, pending=True))
    assert actions.mig_mode is None and actions.reset


def test_disabling_mig_destroys_every_instance_then_switches_the_mode():
    actions = diff(planned(mig=False), observed(gi(1, "3g.40gb", 0), gi(2, "3g.40gb", 4)))
    assert actions.mig_mode is False and actions.reset
    assert [g.id for g in actions.destroy] == [1, 2] and not actions.create


def test_gpu_without_mig_support_is_fine_while_the_plan_keeps_mig_off():
    gpu = {"index": 3, "mig": None, "gpu_instances": []}
    assert not diff(planned(mig=False), gpu).changes
    with pytest.raises(MigDiffError, match="GPU 3 is not MIG capable"):
        diff(planned(("7g.80gb", 0)), gpu)


def test_accepts_the_planner_gpu_plan():
    layout = {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    plan = GpuPlan(0, "A100-80GB", True, layout, solve(A100, layout).instances, 1)
    actions = diff(plan, observed(gi(4, "4g.40gb", 0)))
    assert [g.id for g in actions.keep] == [4]
    assert sorted((t.profile, t.start) for t in actions.create) == [("1g.10gb", 6), ("2g.20gb", 4)]


def test_compute_slices_come_from_the_profile_name():
    assert Instance(0, 2, "1g.20gb", 15).compute_slices == 1
    with pytest.raises(ValueError, match="not a GPU instance profile name"):
        _ = Instance(0, 2, "1c.2g", 15).compute_slices


# --- property: applying the actions yields exactly the plan ---------------------------------

CANDIDATES = [(p, s, z) for p in A100.profiles for s, z in p.placements]


@st.composite
def layouts(draw) -> list[tuple]:
    """Non-overlapping (profile, start, size) on an A100-80GB; compute may exceed 7 (no matter)."""
    picks = draw(st.lists(st.sampled_from(CANDIDATES), max_size=8))
    used, out = 0, []
    for p, s, z in picks:
        mask = ((1 << z) - 1) << s
        if not used & mask:
            used |= mask
            out.append((p, s, z))
    return out


@st.composite
def scenarios(draw) -> tuple[dict, dict]:
    want = draw(st.booleans())
    plan = {
        "index": 0,
        "mig_enabled": want,
        "instances": [
            {"profile": p.name, "profile_id": p.id, "start": s, "size": z}
            for p, s, z in draw(layouts())
        ]
        if want
        else [],
    }
    current = draw(st.booleans())
    gis = []
    if current:
        for n, (p, s, z) in enumerate(draw(layouts())):
            cis = draw(st.sampled_from([(p.compute_slices,), (), (1,), (p.compute_slices,) * 2]))
            gis.append(
                {
                    "id": n + 1,
                    "profile_id": p.id,
                    "profile": p.name,
                    "start": s,
                    "size": z,
                    "compute_instances": [
                        {"id": i, "profile_id": 0, "slice_count": c} for i, c in enumerate(cis)
                    ],
                }
            )
    return plan, {
        "index": 0,
        "mig": {"current": current, "pending": draw(st.booleans())},
        "gpu_instances": gis,
    }


def apply_actions(gpu: dict, actions) -> dict:
    """What a driver does with the actions, in their order; asserts every create fits."""
    mig = dict(gpu["mig"])
    gis = {g["id"]: g for g in gpu["gpu_instances"]}
    destroyed = {g.id for g in actions.destroy}
    assert destroyed <= set(gis)
    gis = {k: g for k, g in gis.items() if k not in destroyed}
    if actions.mig_mode is not None:
        mig["pending"] = actions.mig_mode
    if actions.reset:
        assert not gis, "a mode change must not leave instances behind"
        mig["current"] = mig["pending"]
    used = 0
    for g in gis.values():
        used |= ((1 << g["size"]) - 1) << g["start"]
    next_id = max(gis, default=0) + 100
    for t in actions.create:
        mask = ((1 << t.size) - 1) << t.start
        assert not used & mask, f"{t} overlaps an instance still there"
        used |= mask
        gis[next_id] = {
            "id": next_id,
            "profile_id": t.profile_id,
            "profile": t.profile,
            "start": t.start,
            "size": t.size,
            "compute_instances": [{"id": 0, "profile_id": 0, "slice_count": t.compute_slices}],
        }
        next_id += 1
    return {"index": gpu["index"], "mig": mig, "gpu_instances": list(gis.values())}


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_applying_the_actions_yields_exactly_the_planned_instances(scenario):
    plan, gpu = scenario
    actions = diff(plan, gpu)
    kept = {g.id for g in actions.keep}
    assert kept.isdisjoint(g.id for g in actions.destroy)
    if gpu["mig"]["current"]:
        assert kept | {g.id for g in actions.destroy} == {g["id"] for g in gpu["gpu_instances"]}

    after = apply_actions(gpu, actions)
    assert after["mig"] == {"current": plan["mig_enabled"], "pending": plan["mig_enabled"]}
    assert sorted(
        (g["profile_id"], g["start"], g["size"]) for g in after["gpu_instances"]
    ) == sorted((i["profile_id"], i["start"], i["size"]) for i in plan["instances"])
    assert kept <= {g["id"] for g in after["gpu_instances"]}, "a kept GI keeps its id"
    assert not diff(plan, after).changes, "a second run changes nothing"
