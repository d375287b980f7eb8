"""The test session never uses or stops a lab that a person started (README: `gpuprov lab demo`,
then the tests)."""

from __future__ import annotations

import json

import pytest
from gpuprov_lab.rundir import SCHEMA
from gpuprov_lab.testing import TEST_OWNED, Lab, UserLabUp


def test_a_lab_started_by_a_person_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROV_LAB_DIR", str(tmp_path))
    state = {"schema": SCHEMA, "hosts": [], "started": "2026-12-01T09:00:00"}
    (tmp_path / "lab.json").write_text(json.dumps(state))
    with pytest.raises(UserLabUp, match="gpuprov lab down"):
        Lab.start(hosts=3)
    assert json.loads((tmp_path / "lab.json").read_text()) == state
    assert not (tmp_path / TEST_OWNED).exists()


def test_a_test_that_needs_a_lab_of_its_own_leaves_a_persons_lab_and_its_cluster_up(
    tmp_path, monkeypatch
):
    # The 16-host fleet and the containerd lab make way for their own lab only when the lab
    # that is up is the tests' own; a person's lab (with its control plane) is not stopped.
    monkeypatch.setenv("GPUPROV_LAB_DIR", str(tmp_path))
    kube = {"server": "https://10.200.0.1:16443", "kubeconfig": str(tmp_path / "kube/admin")}
    state = {"schema": SCHEMA, "hosts": [], "started": "2026-12-01T09:00:00", "kube": kube}
    (tmp_path / "lab.json").write_text(json.dumps(state))
    with pytest.raises(UserLabUp, match="leave yours alone"):
        Lab.make_way()
    assert json.loads((tmp_path / "lab.json").read_text()) == state
