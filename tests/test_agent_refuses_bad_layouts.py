"""The agent refuses a layout that breaks the GPU's MIG rules before it touches anything.

Each class of bad layout from issue #11 goes through ``apply``, ``apply --check`` and
``apply --boot`` against a simulated A100-80GB host that already runs a working layout: exit 2,
one ``error:`` line per problem, and the simulated driver's state file byte for byte unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import admin

from gpuprov.core.catalog import find_model
from gpuprov.core.mig.solver import solve
from gpuprov.host.agent.main import main
from gpuprov.host.contract import AGENT_EXIT_BAD_INPUT, MIG_LAYOUT_SCHEMA


def gi(profile: str, profile_id: int, start: int, size: int) -> dict:
    return {"profile": profile, "profile_id": profile_id, "start": start, "size": size}


@pytest.fixture
def working_host(tmp_path, monkeypatch) -> Path:
    """Two A100-80GB GPUs with 3g.40gb x 2 applied on GPU 0 (so a bad apply has much to break)."""
    state = tmp_path / "gpus.json"
    admin.create(str(state), "A100-80GB", 2, seed="refuse")
    monkeypatch.setenv(SIM_ENV, str(state))
    good = [i.as_dict() for i in solve(find_model("A100-80GB"), {"3g.40gb": 2}).instances]
    with sim_state.transaction(str(state)) as s:
        s["gpus"][0]["mig_current"] = s["gpus"][0]["mig_pending"] = True
    write(tmp_path, [{"index": 0, "mig_enabled": True, "instances": good}])
    assert main(["apply", "--layout", str(tmp_path / "mig-layout.json")]) == 0
    assert len(sim_state.load(str(state))["gpus"][0]["gpu_instances"]) == 2
    return tmp_path


def write(path: Path, gpus: list[dict]) -> Path:
    layout = path / "mig-layout.json"
    layout.write_text(json.dumps({"schema": MIG_LAYOUT_SCHEMA, "gpus": gpus}))
    return layout


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


BAD_LAYOUTS = {
    "overlapping instances": (
        [gi("4g.40gb", 5, 0, 4), gi("3g.40gb", 9, 0, 4)],
        ["3g.40gb at slots 0-3 overlaps 4g.40gb at slots 0-3"],
    ),
    "a profile the GPU lacks": (
        [gi("5g.60gb", 99, 0, 4)],
        ["5g.60gb (id 99): this GPU (NVIDIA A100-SXM4-80GB) has no profile id 99; it has "],
    ),
    "name and id disagree": (
        [gi("2g.20gb", 9, 0, 4)],
        ["2g.20gb (id 9): profile id 9 is 3g.40gb on this GPU, not 2g.20gb"],
    ),
    "placement not allowed for the profile": (
        [gi("3g.40gb", 9, 2, 4)],
        ["3g.40gb (id 9) cannot sit at slots 2-5; its placements are slots 0-3, slots 4-7"],
    ),
    "more compute slices than the GPU has": (
        [gi("2g.20gb", 14, 0, 2), gi("2g.20gb", 14, 2, 2)]
        + [gi("1g.10gb", 19, s, 1) for s in (4, 5, 6, 7)],
        [
            "1g.10gb (id 19) cannot sit at slot 7",
            "the instances need 8 compute slices; this GPU has 7",
        ],
    ),
    "more instances of a profile than the GPU allows": (
        [gi("1g.10gb+me", 20, 0, 1), gi("1g.10gb+me", 20, 1, 1)],
        ["2 instances of 1g.10gb+me; this GPU allows at most 1"],
    ),
}


@pytest.mark.parametrize("flags", [(), ("--check",), ("--boot",)], ids=["apply", "check", "boot"])
@pytest.mark.parametrize("case", sorted(BAD_LAYOUTS))
def test_a_layout_breaking_mig_rules_is_refused_and_the_gpus_are_untouched(
    working_host, capsys, case, flags
):
    instances, messages = BAD_LAYOUTS[case]
    layout = write(working_host, [{"index": 0, "mig_enabled": True, "instances": instances}])
    state = working_host / "gpus.json"
    before = sha256(state)
    capsys.readouterr()

    code = main(["apply", "--layout", str(layout), *flags])

    out, err = capsys.readouterr()
    assert code == AGENT_EXIT_BAD_INPUT
    assert out == ""
    lines = err.splitlines()
    assert lines and all(line.startswith(f"error: {layout}: ") for line in lines)
    for message in messages:
        assert any(message in line for line in lines), (message, lines)
    assert "Traceback" not in err
    assert sha256(state) == before


def test_a_valid_layout_on_another_gpu_model_is_judged_by_that_gpus_own_profiles(
    tmp_path, monkeypatch, capsys
):
    # 3g.40gb is id 9 on an A100-80GB; an A100-40GB names id 9 3g.20gb. The agent asks NVML.
    state = tmp_path / "gpus.json"
    admin.create(str(state), "A100-40GB", 1, seed="refuse-40")
    monkeypatch.setenv(SIM_ENV, str(state))
    layout = write(
        tmp_path, [{"index": 0, "mig_enabled": True, "instances": [gi("3g.40gb", 9, 4, 4)]}]
    )

    code = main(["apply", "--layout", str(layout), "--check"])

    assert code == AGENT_EXIT_BAD_INPUT
    assert "profile id 9 is 3g.20gb on this GPU, not 3g.40gb" in capsys.readouterr().err


def test_mig_on_a_gpu_without_mig_is_refused(tmp_path, monkeypatch, capsys):
    state = tmp_path / "gpus.json"
    admin.create(str(state), "L40S", 1, seed="refuse-l40s")
    monkeypatch.setenv(SIM_ENV, str(state))
    layout = write(tmp_path, [{"index": 0, "mig_enabled": True, "instances": []}])
    before = sha256(state)

    code = main(["apply", "--layout", str(layout)])

    assert code == AGENT_EXIT_BAD_INPUT
    assert "GPU 0: not MIG capable" in capsys.readouterr().err
    assert sha256(state) == before
