"""The simulated driver's health state: gpuprov-sim's fault commands refuse bad input with one
line and exit 2, and a hand-edited health entry of the wrong shape is one clear StateError."""

from __future__ import annotations

import pytest
from gpuprov_lab.sim import state as sim_state
from simulated import edit, new_host, run_program


@pytest.mark.parametrize(
    "args, message",
    [
        (["inject", "xid", "79", "--gpu", "5"], "no GPU 5 (the host has 2)"),
        (["set-ecc", "--gpu", "0", "--uncorrected", "-1"], "--uncorrected counts cannot be"),
        (["remap-pending", "--gpu", "-1"], "no GPU -1"),
    ],
)
def test_a_bad_fault_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    path = new_host(tmp_path, "A100-80GB", 2)
    before = sim_state.load(path)
    assert run_program("gpuprov-sim", ["--state", path, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuprov-sim: error: ") and message in err
    assert err.count("\n") == 1
    assert sim_state.load(path) == before


def test_a_health_entry_of_the_wrong_shape_is_a_state_error(tmp_path):
    path = new_host(tmp_path, "A100-80GB", 1)
    with edit(path) as state:
        state["gpus"][0]["health"]["remapped_rows"]["pending"] = "yes"
    with pytest.raises(sim_state.StateError, match=r"gpus\[0\]\.health must be"):
        sim_state.load(path)


def test_a_state_file_from_before_health_still_loads_as_healthy(tmp_path):
    path = new_host(tmp_path, "H100-80GB", 1)
    with edit(path) as state:
        del state["gpus"][0]["health"]
    gpu = sim_state.load(path)["gpus"][0]
    assert sim_state.health(gpu) == sim_state.new_health()
