"""The test session never uses or stops a lab that a person started (README: `gpuprov lab demo`,
then the tests)."""

from __future__ import annotations

import json

import pytest

from gpuprov.lab.rundir import SCHEMA
from gpuprov.lab.testing import TEST_OWNED, Lab, UserLabUp


def test_a_lab_started_by_a_person_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROV_LAB_DIR", str(tmp_path))
    state = {"schema": SCHEMA, "hosts": [], "started": "2026-12-01T09:00:00"}
    (tmp_path / "lab.json").write_text(json.dumps(state))
    with pytest.raises(UserLabUp, match="gpuprov lab down"):
        Lab.start(hosts=3)
    assert json.loads((tmp_path / "lab.json").read_text()) == state
    assert not (tmp_path / TEST_OWNED).exists()
