"""The host side of MPS: the tmpfiles.d entry that makes the MPS root at every boot and the root
itself, on MPS hosts only; switching a host between time-slicing and MPS leaves nothing behind
that verify would not name."""

from __future__ import annotations

from plans import plan_for

from gpuprov.core.hostfiles import mps_root
from gpuprov.host.contract import MPS_TMPFILES_PATH
from gpuprov.host.files import read_files

ROOT = "/run/nvidia/mps"
DIRECTORY = {"error": "not a regular file (directory)"}


def mps_plan(tmp_path, **data):
    return plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps", **data)


def test_what_the_deploy_makes_passes_the_check(tmp_path):
    plan = mps_plan(tmp_path)
    files = {MPS_TMPFILES_PATH: mps_root.render(plan), ROOT: DIRECTORY}
    assert mps_root.check(plan, files) == []
    assert mps_root.paths(plan).files == (MPS_TMPFILES_PATH, ROOT)


def test_the_entry_makes_the_planned_root_root_owned_0755(tmp_path):
    plan = mps_plan(tmp_path, mps_root="/var/lib/nvidia-mps")
    assert mps_root.render(plan).splitlines()[-1] == 'd "/var/lib/nvidia-mps" 0755 root root -'


def test_time_sliced_and_mig_hosts_have_no_entry_and_read_no_root(tmp_path):
    for plan in (
        plan_for(tmp_path, "shared", time_slicing_replicas=4),
        plan_for(tmp_path, "mig", mig_layout={"7g.80gb": 1}),
        plan_for(tmp_path, "whole_card"),
    ):
        assert mps_root.render(plan) is None
        assert mps_root.paths(plan).files == (MPS_TMPFILES_PATH,)
        assert mps_root.check(plan, {MPS_TMPFILES_PATH: None}) == []


def test_an_entry_left_on_a_host_that_went_back_to_time_slicing_is_a_leftover(tmp_path):
    left = mps_root.render(mps_plan(tmp_path))
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    [finding] = mps_root.check(plan, {MPS_TMPFILES_PATH: left, ROOT: DIRECTORY})
    assert finding.check == "leftover" and MPS_TMPFILES_PATH in finding.expected


def test_a_missing_entry_and_a_missing_root_are_two_findings(tmp_path):
    plan = mps_plan(tmp_path)
    findings = mps_root.check(plan, {MPS_TMPFILES_PATH: None, ROOT: None})
    assert [(f.check, f.found) for f in findings] == [("mps", "missing"), ("mps", "missing")]
    assert ROOT in findings[1].expected


def test_an_entry_for_another_root_or_mode_is_a_finding(tmp_path):
    plan = mps_plan(tmp_path)
    text = mps_root.render(plan).replace("0755", "1777")
    [finding] = mps_root.check(plan, {MPS_TMPFILES_PATH: text, ROOT: DIRECTORY})
    assert finding.found == 'd "/run/nvidia/mps" 1777 root root -'


def test_a_file_where_the_root_should_be_is_not_a_directory(tmp_path):
    plan = mps_plan(tmp_path)
    files = {MPS_TMPFILES_PATH: mps_root.render(plan), ROOT: "a file\n"}
    [finding] = mps_root.check(plan, files)
    assert finding.found == "not a directory"


def test_the_probe_reports_a_directory_as_the_check_expects(tmp_path):
    (tmp_path / "root").mkdir()
    found = read_files([str(tmp_path / "root"), str(tmp_path / "none")], [])
    assert found == {str(tmp_path / "root"): mps_root.DIRECTORY, str(tmp_path / "none"): None}
