"""`gpuprov mig check` refuses malformed layouts with `error:` on stderr and exit 2."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuprov.cli import main


def mig_check(*args: str):
    return CliRunner().invoke(main, ["mig", "check", *args])


@pytest.mark.parametrize(
    "item",
    ["1g.10gb=²", "1g.10gb=٣", "1g.10gb=" + "9" * 5000, "1g.10gb=-1", "1g.10gb=", "1g.10gb"],
)
def test_count_that_is_not_ascii_digits_is_bad_input(item):
    result = mig_check("A100-80GB", item)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert result.stderr.startswith("error: command line: LAYOUT:")
    assert "is not PROFILE=COUNT" in result.stderr


def test_count_above_what_any_gpu_has_is_bad_input():
    result = mig_check("A100-80GB", "1g.10gb=8")
    assert result.exit_code == 2 and "must be <= 7" in result.stderr


def test_unknown_profile_is_an_error_on_stderr_not_a_verdict():
    result = mig_check("A100-80GB", "3g.4gb=1")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error: command line: LAYOUT: unknown profile '3g.4gb'" in result.stderr


def test_repeated_profile_is_an_error_not_a_sum():
    result = mig_check("A100-80GB", "1g.10gb=3", "1g.10gb=4")
    assert result.exit_code == 2
    assert "'1g.10gb' is given twice" in result.stderr


def test_all_zero_counts_are_refused_as_mig_parted_does():
    result = mig_check("A100-80GB", "1g.10gb=0")
    assert result.exit_code == 2 and "every count is 0" in result.stderr


def test_a_layout_that_fits_exits_0_and_one_that_does_not_exits_1():
    assert mig_check("A100-80GB", "4g.40gb=1", "3g.40gb=1").exit_code == 0
    result = mig_check("A30-24GB", "1g.6gb+me=1", "2g.12gb+me=1")
    assert result.exit_code == 1 and "media engines" in result.stdout
