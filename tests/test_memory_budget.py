"""The memory a GPU share may use: the pure check any sharing strategy asks (time-slicing and
MPS replicas here, a vGPU split count as well), in the catalog's MiB with budgets in GiB."""

from __future__ import annotations

import pytest

from gpuprov.core.memory_budget import (
    gib,
    mps_budget_note,
    mps_limit_mib,
    overcommitted,
    share_memory,
)

A100_80GB = 81920
H200 = 143771


@pytest.mark.parametrize(
    "memory,shares,budget",
    [(A100_80GB, 4, 20), (A100_80GB, 1, 80), (H200, 10, 14), (A100_80GB, 10, 8), (15360, 4, 3.75)],
)
def test_shares_that_fit_exactly_or_with_room_are_no_problem(memory, shares, budget):
    assert overcommitted(memory, shares, budget) is None


def test_a_ten_way_split_of_an_80_gib_gpu_at_10_gib_says_what_fits():
    assert overcommitted(A100_80GB, 10, 10) == (
        "10 shares x 10 GiB = 102400 MiB is more than one GPU's 81920 MiB (80 GiB); "
        "8 shares of 10 GiB fit, or 8 GiB per share for 10"
    )


def test_one_mib_over_is_over():
    assert overcommitted(A100_80GB + 1, 1, 80) is None
    assert overcommitted(A100_80GB - 1, 1, 80) is not None


def test_shown_gib_round_down_so_a_share_shown_as_fitting_fits():
    assert gib(46068 // 3) == "14.9"  # 15356 MiB is 14.996 GiB
    assert overcommitted(46068, 3, float(gib(46068 // 3))) is None


def test_the_mps_limit_is_memory_over_replicas_in_whole_mib():
    assert mps_limit_mib(A100_80GB, 3) == 27306
    assert share_memory(A100_80GB, 3, None, "mps").mib == 27306


def test_under_mps_the_limit_holds_whatever_the_budget():
    memory = share_memory(A100_80GB, 4, 5, "mps")
    assert (memory.mib, memory.enforced, memory.label()) == (20480, True, "20 GiB (MPS limit)")


def test_under_time_slicing_the_budget_or_an_even_split_is_shown_as_not_enforced():
    assert share_memory(A100_80GB, 4, None, "time-slicing").label() == "20 GiB (not enforced)"
    assert share_memory(A100_80GB, 4, 7.5, "time-slicing").label() == "7.5 GiB (not enforced)"


def test_an_mps_budget_below_the_limit_names_the_replicas_that_would_enforce_it():
    assert mps_budget_note(A100_80GB, 4, 20) is None
    assert mps_budget_note(A100_80GB, 4, 30) is None  # over the limit: overcommitted() speaks
    note = mps_budget_note(A100_80GB, 4, 10)
    assert "memory / replicas = 20 GiB, not 10 GiB" in note
    assert "8 replicas would make the limit 10 GiB" in note
