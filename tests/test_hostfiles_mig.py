"""mig-layout.json and the MIG boot unit: what the deploy renders, verify's check accepts, and
any one changed field is exactly one finding naming it (issue #9 item 3)."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.controller.inventory import load
from gpuprov.core.hostfiles import mig_layout, mig_unit
from gpuprov.core.plan import build
from gpuprov.host.contract import MIG_LAYOUT_PATH, MIG_UNIT_PATH
from gpuprov.host.mig import layout as agent_layout

NON_DEFAULT = {
    "gpu_clients": ["dcgm-exporter", "my-inference.service"],
    "mig_reboot": True,
    "gpuprov_agent_path": "/opt/gpuprov/agent.pyz",
    "gpuprov_python": "/usr/bin/python3.11",
}
MIG_HOSTS = {
    "a100-balanced": {
        "gpu_model": "A100-80GB",
        "gpu_count": 2,
        "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
    },
    "a100-whole-gpu-instances": {
        "gpu_model": "A100-80GB",
        "gpu_count": 1,
        "mig_layout": {"7g.80gb": 1},
    },
    "h100-per-gpu-non-default": {
        "gpu_model": "H100-80GB",
        "gpu_count": 2,
        "mig_layout": {"1g.10gb": 7},
        "mig_layout_by_gpu": {1: {"4g.40gb": 1, "3g.40gb": 1}},
        **NON_DEFAULT,
    },
    "a30-reboot-allowed": {
        "gpu_model": "A30-24GB",
        "gpu_count": 1,
        "mig_layout": {"2g.12gb": 2},
        "mig_reboot": True,
    },
}


def plan_for(tmp_path, mode: str, **data):
    data = {"driver_version": "535.261.03", **data}
    directory = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    path = directory / "inv.py"
    path.write_text(f"{mode} = [('n1', {data!r})]\n")
    return build(load(str(path))).host("n1")


@pytest.fixture(params=sorted(MIG_HOSTS))
def mig_plan(request, tmp_path):
    return plan_for(tmp_path, "mig", **MIG_HOSTS[request.param])


def deployed(plan) -> dict[str, str]:
    """The two files as the deploy writes them."""
    return {MIG_LAYOUT_PATH: mig_layout.render(plan), MIG_UNIT_PATH: mig_unit.render(plan)}


def findings(plan, files) -> list[tuple]:
    found = mig_layout.check(plan, files) + mig_unit.check(plan, files)
    return [(f.gpu, f.check, f.expected, f.found) for f in found]


def edited_layout(plan, edit) -> dict[str, str]:
    files = deployed(plan)
    document = json.loads(files[MIG_LAYOUT_PATH])
    edit(document)
    files[MIG_LAYOUT_PATH] = json.dumps(document)
    return files


# --- what the deploy writes, verify accepts; the agent reads the same model


def test_rendered_files_check_clean(mig_plan):
    assert findings(mig_plan, deployed(mig_plan)) == []


def test_the_agent_reads_the_rendered_layout_as_the_plan_made_it(mig_plan, tmp_path):
    path = tmp_path / "mig-layout.json"
    path.write_text(mig_layout.render(mig_plan))

    assert agent_layout.load(str(path)) == mig_layout.from_plan(mig_plan)


def test_non_default_settings_reach_both_files(tmp_path):
    plan = plan_for(tmp_path, "mig", **MIG_HOSTS["h100-per-gpu-non-default"])
    files = deployed(plan)

    assert json.loads(files[MIG_LAYOUT_PATH])["gpu_clients"] == NON_DEFAULT["gpu_clients"]
    assert json.loads(files[MIG_LAYOUT_PATH])["allow_reboot"] is True
    assert mig_unit.parse_unit(files[MIG_UNIT_PATH])[("Service", "ExecStart")] == (
        f"/usr/bin/python3.11 /opt/gpuprov/agent.pyz apply --boot --layout {MIG_LAYOUT_PATH}",
    )


# --- one field changed: exactly that finding


def test_another_layout_on_one_gpu_is_one_finding_for_that_gpu(mig_plan):
    found = findings(
        mig_plan, edited_layout(mig_plan, lambda d: d["gpus"][-1].update(instances=[]))
    )

    last = mig_plan.gpus[-1].index
    assert [(gpu, check) for gpu, check, _, _ in found] == [(last, "mig-layout")]
    assert found[0][3] == "MIG enabled: no instances"


@pytest.mark.parametrize(
    "field, edit",
    [
        ("start", lambda i: i.update(start=i["start"] + 1)),
        ("profile_id", lambda i: i.update(profile_id=i["profile_id"] + 100)),
        ("profile", lambda i: i.update(profile="9g.99gb")),
        ("size", lambda i: i.update(size=i["size"] + 1)),
    ],
)
def test_one_instance_field_changed_is_one_finding_for_its_gpu(tmp_path, field, edit):
    # One 7g instance: any start or size stays clear of other instances (no overlap error).
    plan = plan_for(tmp_path, "mig", **MIG_HOSTS["a100-whole-gpu-instances"])

    found = findings(plan, edited_layout(plan, lambda d: edit(d["gpus"][0]["instances"][0])))

    assert [(gpu, check) for gpu, check, _, _ in found] == [(0, "mig-layout")], field


def test_mig_disabled_in_the_file_is_one_finding(tmp_path):
    plan = plan_for(tmp_path, "mig", **MIG_HOSTS["a100-balanced"])

    found = findings(
        plan, edited_layout(plan, lambda d: d["gpus"][0].update(mig_enabled=False, instances=[]))
    )

    assert found == [(0, "mig-layout", found[0][2], "MIG disabled")]


def test_gpu_clients_changed_is_one_finding_naming_them(mig_plan):
    found = findings(mig_plan, edited_layout(mig_plan, lambda d: d.update(gpu_clients=["x"])))

    assert found == [
        (
            None,
            "mig-layout",
            f"gpu_clients {mig_plan.mig.gpu_clients}",
            "gpu_clients ['x']",
        )
    ]


def test_allow_reboot_flipped_is_one_finding(mig_plan):
    want = mig_plan.mig.mig_reboot

    found = findings(mig_plan, edited_layout(mig_plan, lambda d: d.update(allow_reboot=not want)))

    assert found == [
        (
            None,
            "mig-layout",
            f"allow_reboot {json.dumps(want)}",
            f"allow_reboot {json.dumps(not want)}",
        )
    ]


def test_a_gpu_missing_from_the_file_and_one_too_many_are_one_finding_each(tmp_path):
    plan = plan_for(tmp_path, "mig", **MIG_HOSTS["a100-balanced"])

    def edit(document):
        document["gpus"][1]["index"] = 5

    found = findings(plan, edited_layout(plan, edit))

    assert [(gpu, found) for gpu, _, _, found in found] == [
        (1, "no entry"),
        (5, found[1][3]),
    ]
    assert found[1][2] == "no entry (not a planned GPU)"


@pytest.mark.parametrize(
    "key, value",
    [
        ("ExecStart", "/usr/bin/python3 /tmp/other.pyz apply --boot"),
        ("ConditionPathExists", "/etc/other.json"),
        ("Before", "multi-user.target"),
    ],
)
def test_one_unit_directive_changed_is_one_finding_naming_it(mig_plan, key, value):
    files = deployed(mig_plan)
    lines = [
        f"{key}={value}" if line.startswith(f"{key}=") else line
        for line in files[MIG_UNIT_PATH].splitlines()
    ]
    files[MIG_UNIT_PATH] = "\n".join(lines) + "\n"

    found = findings(mig_plan, files)

    assert len(found) == 1
    assert found[0][:2] == (None, "mig-unit")
    assert f"] {key}=" in found[0][2] and found[0][3].endswith(f"{key}={value!r}")


def test_a_removed_unit_directive_is_one_finding_saying_unset(mig_plan):
    files = deployed(mig_plan)
    files[MIG_UNIT_PATH] = files[MIG_UNIT_PATH].replace("RemainAfterExit=yes\n", "")

    assert [f[3] for f in findings(mig_plan, files)] == ["[Service] RemainAfterExit unset"]


def test_unit_comments_and_spacing_are_not_drift(mig_plan):
    files = deployed(mig_plan)
    files[MIG_UNIT_PATH] = "# edited by hand\n" + files[MIG_UNIT_PATH].replace("=", " = ")

    assert findings(mig_plan, files) == []


# --- files verify cannot use are findings, never exceptions


@pytest.mark.parametrize(
    "text, found",
    [
        ("{", "not JSON"),
        ('{"schema": "gpuprov.mig-layout/v2", "gpus": []}', "schema is 'gpuprov.mig-layout/v2'"),
        ('{"schema": "gpuprov.mig-layout/v1", "gpus": [{"index": "0"}]}', "gpus[0] lacks"),
        ("[" * 100_000, "not JSON"),
        ('{"schema": "gpuprov.mig-layout/v1", "gpus": [], "evil\\nkey": 1}', "'evil\\nkey'"),
    ],
)
def test_a_malformed_layout_file_is_one_finding(mig_plan, text, found):
    files = {**deployed(mig_plan), MIG_LAYOUT_PATH: text}

    result = findings(mig_plan, files)

    assert len(result) == 1 and result[0][1] == "mig-layout"
    assert found in result[0][3] and "\n" not in result[0][3]


def test_a_file_the_probe_would_not_read_is_a_finding(mig_plan):
    marker = {"error": "larger than 1048576 bytes; the probe reads no more"}
    files = {MIG_LAYOUT_PATH: marker, MIG_UNIT_PATH: {"error": "not a regular file (FIFO)"}}

    assert [f[3] for f in findings(mig_plan, files)] == [
        f"not read: {marker['error']}",
        "not read: not a regular file (FIFO)",
    ]


# --- hosts outside mig: either file present is a leftover


@pytest.mark.parametrize("mode", ["shared", "whole_card"])
def test_files_left_on_a_host_outside_mig_are_leftovers(tmp_path, mode):
    extra = {"time_slicing_replicas": 2} if mode == "shared" else {}
    plan = plan_for(tmp_path, mode, gpu_model="A100-80GB", gpu_count=1, **extra)
    mig = plan_for(tmp_path, "mig", **MIG_HOSTS["a100-whole-gpu-instances"])

    assert findings(plan, {MIG_LAYOUT_PATH: None, MIG_UNIT_PATH: None}) == []
    found = findings(plan, deployed(mig))
    assert [(f[1], f[2]) for f in found] == [
        ("leftover", f"no {MIG_LAYOUT_PATH} (not a MIG host)"),
        ("leftover", f"no {MIG_UNIT_PATH} (not a MIG host)"),
    ]


def test_outside_mig_the_layout_the_agent_applies_turns_mig_off(tmp_path):
    plan = plan_for(tmp_path, "whole_card", gpu_model="A100-80GB", gpu_count=2)

    layout = mig_layout.from_plan(plan)

    assert [(g.index, g.mig_enabled, g.instances) for g in layout.gpus] == [
        (0, False, ()),
        (1, False, ()),
    ]


# --- generated malformed layout files: a finding or a clean parse, never an exception


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
LAYOUT_KEYS = st.sampled_from(
    [
        "schema",
        "gpus",
        "gpu_clients",
        "allow_reboot",
        "index",
        "mig_enabled",
        "instances",
        "profile",
        "profile_id",
        "start",
        "size",
    ]
)


def mutated_layouts():
    """Rendered-looking documents with keys dropped, added or given generated values."""
    base = {
        "schema": "gpuprov.mig-layout/v1",
        "gpus": [
            {
                "index": 0,
                "mig_enabled": True,
                "instances": [{"profile": "3g.40gb", "profile_id": 9, "start": 0, "size": 4}],
            }
        ],
        "gpu_clients": ["nvidia-persistenced"],
        "allow_reboot": False,
    }

    def mutate(edits):
        document = json.loads(json.dumps(base))
        # Taken before any edit: an edit may detach a level, the others still apply.
        levels = [document, document["gpus"][0], document["gpus"][0]["instances"][0]]
        for path, key, value in edits:
            target = levels[path]
            if value is None and key in target:
                del target[key]
            else:
                target[key] = value
        return document

    return st.lists(
        st.tuples(st.integers(0, 2), LAYOUT_KEYS, JSON_VALUES), min_size=1, max_size=4
    ).map(mutate)


@functools.cache
def generated_plan():
    """One mig plan for every generated example (built once: hypothesis reruns the test)."""
    return plan_for(Path(tempfile.mkdtemp()), "mig", **MIG_HOSTS["a100-balanced"])


@settings(max_examples=300, deadline=1000)
@given(st.one_of(JSON_VALUES, mutated_layouts()))
def test_generated_layout_files_never_raise_in_verify_or_the_agent(document):
    text = json.dumps(document)
    try:
        parsed = mig_layout.loads(text)
    except mig_layout.LayoutError as e:
        assert "\n" not in str(e)
    else:
        assert mig_layout.loads(parsed.text()) == parsed
    found = mig_layout.check(generated_plan(), {MIG_LAYOUT_PATH: text})
    assert all(f.check == "mig-layout" for f in found)
