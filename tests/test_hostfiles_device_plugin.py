"""The device plugin config: what the deploy writes, verify's check accepts, field by field; what
the host's file holds in a shape the plugin refuses is a finding, as NVIDIA's own parser says."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time

import pytest
from plans import plan_for
from simulated import without_driver
from upstream import upstream_binary

from gpuprov.core.hostfiles import device_plugin

DEFAULT_PATH = "/etc/nvidia/device-plugin/config.yaml"
OTHER_PATH = "/opt/k8s/nvidia/plugin config.yaml"
BALANCED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}

VARIANTS = {
    "shared": ("shared", {"time_slicing_replicas": 4}),
    "shared-plain-other-path": (
        "shared",
        {
            "time_slicing_replicas": 8,
            "time_slicing_rename": False,
            "time_slicing_fail_requests_greater_than_one": False,
            "device_plugin_config_path": OTHER_PATH,
        },
    ),
    "shared-mps": ("shared", {"time_slicing_replicas": 4, "sharing_strategy": "mps"}),
    "shared-mps-plain-other-root": (
        "shared",
        {
            "time_slicing_replicas": 2,
            "sharing_strategy": "mps",
            "time_slicing_rename": False,
            "time_slicing_fail_requests_greater_than_one": False,
            "mps_root": "/var/lib/nvidia mps: #1",
            "device_plugin_config_path": OTHER_PATH,
        },
    ),
    "mig-mixed": ("mig", {"mig_layout": BALANCED}),
    "mig-single-other-path": (
        "mig",
        {
            "mig_layout": {"1g.10gb": 7},
            "mig_strategy": "single",
            "device_plugin_config_path": OTHER_PATH,
        },
    ),
    "whole_card": ("whole_card", {}),
    "whole_card-other-path": ("whole_card", {"device_plugin_config_path": OTHER_PATH}),
}


@pytest.fixture(params=list(VARIANTS))
def variant(request, tmp_path):
    mode, data = VARIANTS[request.param]
    return plan_for(tmp_path, mode, **data)


def written(plan) -> dict:
    """The host's files as the deploy leaves them."""
    return {plan.device_plugin.device_plugin_config_path: device_plugin.render(plan)}


def test_what_the_deploy_writes_passes_the_check(variant):
    assert device_plugin.check(variant, written(variant)) == []


def test_the_probe_reads_the_planned_path(variant):
    assert device_plugin.paths(variant).files == (variant.device_plugin.device_plugin_config_path,)


def test_whole_card_hosts_get_no_file_and_any_file_is_a_leftover(tmp_path):
    plan = plan_for(tmp_path, "whole_card", device_plugin_config_path=OTHER_PATH)
    assert device_plugin.render(plan) is None and device_plugin.document(plan) is None
    [finding] = device_plugin.check(plan, {OTHER_PATH: "version: v1\n"})
    assert (finding.check, finding.expected) == (
        "leftover",
        f"no device plugin config at {OTHER_PATH}",
    )


SHARED_EDITS = [
    ("replicas: 4", "replicas: 5", "nvidia.com/gpu replicas: 4", "nvidia.com/gpu replicas: 5"),
    (
        "renameByDefault: true",
        "renameByDefault: false",
        "sharing.timeSlicing.renameByDefault: true",
        "sharing.timeSlicing.renameByDefault: false",
    ),
    (
        "failRequestsGreaterThanOne: true",
        "failRequestsGreaterThanOne: false",
        "sharing.timeSlicing.failRequestsGreaterThanOne: true",
        "sharing.timeSlicing.failRequestsGreaterThanOne: false",
    ),
    (
        "failRequestsGreaterThanOne: true",
        'failRequestsGreaterThanOne: "true"',
        "sharing.timeSlicing.failRequestsGreaterThanOne: true",
        'sharing.timeSlicing.failRequestsGreaterThanOne: "true"',
    ),
    (
        "migStrategy: none",
        "migStrategy: mixed",
        'flags.migStrategy: "none"',
        'flags.migStrategy: "mixed"',
    ),
    ("version: v1", "version: v2", 'version: "v1"', 'version: "v2"'),
    ("name: nvidia.com/gpu", "name: nvidia.com/gpu-x", "nvidia.com/gpu replicas: 4", "unset"),
]


@pytest.mark.parametrize("old,new,expected,found", SHARED_EDITS)
def test_one_changed_field_is_exactly_one_finding_for_that_field(
    tmp_path, old, new, expected, found
):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    text = device_plugin.render(plan)
    assert old in text
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: text.replace(old, new)})
    assert (finding.check, finding.expected, finding.found) == ("device-plugin", expected, found)


def test_mig_strategy_and_a_sharing_section_on_a_mig_host(tmp_path):
    plan = plan_for(tmp_path, "mig", mig_layout=BALANCED, device_plugin_config_path=OTHER_PATH)
    text = device_plugin.render(plan)
    [finding] = device_plugin.check(plan, {OTHER_PATH: text.replace("mixed", "single")})
    assert (finding.expected, finding.found) == (
        'flags.migStrategy: "mixed"',
        'flags.migStrategy: "single"',
    )
    sharing = text + "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"
    [finding] = device_plugin.check(plan, {OTHER_PATH: sharing})
    assert (finding.check, finding.found) == ("leftover", "sharing: timeSlicing")


def test_unset_version_and_strategy_read_as_the_plugin_defaults(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    text = (
        device_plugin.render(plan).replace("version: v1\n", "").replace("  migStrategy: none\n", "")
    )
    assert device_plugin.check(plan, {DEFAULT_PATH: text.replace("flags:\n", "")}) == []


def test_mps_wins_over_time_slicing(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    text = device_plugin.render(plan) + "  mps:\n    resources: [{name: gpu, replicas: 4}]\n"
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: text})
    assert finding.found == "sharing.mps is set (MPS wins over time-slicing)"


MPS_EDITS = [
    (
        "replicas: 4",
        "replicas: 5",
        "sharing.mps nvidia.com/gpu replicas: 4",
        "sharing.mps nvidia.com/gpu replicas: 5",
    ),
    (
        'mpsRoot: "/run/nvidia/mps"',
        "mpsRoot: /tmp/mps",
        'flags.mpsRoot: "/run/nvidia/mps"',
        'flags.mpsRoot: "/tmp/mps"',
    ),
    (
        "renameByDefault: true",
        "renameByDefault: false",
        "sharing.mps.renameByDefault: true",
        "sharing.mps.renameByDefault: false",
    ),
    (
        "    failRequestsGreaterThanOne: true\n",
        "    failRequestsGreaterThanOne: false\n",
        "sharing.mps.failRequestsGreaterThanOne: true",
        "sharing.mps.failRequestsGreaterThanOne: false",
    ),
]


@pytest.mark.parametrize("old,new,expected,found", MPS_EDITS)
def test_one_changed_mps_field_is_exactly_one_finding_for_that_field(
    tmp_path, old, new, expected, found
):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps")
    text = device_plugin.render(plan)
    assert old in text
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: text.replace(old, new)})
    assert (finding.check, finding.expected, finding.found) == ("device-plugin", expected, found)


def test_an_unset_mps_request_limit_reads_as_the_plugins_true(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps")
    text = device_plugin.render(plan).replace("    failRequestsGreaterThanOne: true\n", "")
    assert device_plugin.check(plan, {DEFAULT_PATH: text}) == []


def test_a_time_sliced_file_on_an_mps_host_is_one_finding_for_the_strategy(tmp_path):
    time_sliced = device_plugin.render(plan_for(tmp_path, "shared", time_slicing_replicas=4))
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps")
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: time_sliced})
    assert (finding.check, finding.expected, finding.found) == (
        "device-plugin",
        "sharing.mps (MPS)",
        "sharing: timeSlicing",
    )


def test_a_time_slicing_section_left_beside_mps_is_a_leftover(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4, sharing_strategy="mps")
    text = device_plugin.render(plan).replace(
        "sharing:\n", "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"
    )
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: text})
    assert (finding.check, finding.expected) == ("leftover", "sharing.mps only")


def test_the_host_name_cannot_add_lines_to_the_file(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    text = device_plugin.render(dataclasses.replace(plan, name="n1\nsharing: x"))
    assert text.count("\n") == device_plugin.render(plan).count("\n")
    assert device_plugin.check(plan, {DEFAULT_PATH: text}) == []


# Files in shapes NVIDIA's parser refuses: each is a finding, never an exception or a pass.
MALFORMED = {
    "time slicing is a list": "version: v1\nsharing:\n  timeSlicing: [1]\n",
    "resources is a number": "version: v1\nsharing:\n  timeSlicing:\n    resources: 5\n",
    "a resource is a number": "version: v1\nsharing:\n  timeSlicing:\n    resources: [1]\n",
    "flags is a list": "version: v1\nflags: [migStrategy]\n",
    "sharing is a string": "version: v1\nsharing: timeSlicing\n",
    "the file is a list": "- version: v1\n",
    "replicas is a string": (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "      - name: nvidia.com/gpu\n        replicas: '4'\n"
    ),
    "not YAML": "sharing: [unclosed\n",
}


@pytest.mark.parametrize("text", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_file_the_plugin_refuses_is_a_finding(tmp_path, text):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    findings = device_plugin.check(plan, {DEFAULT_PATH: text})
    assert findings and {f.check for f in findings} == {"device-plugin"}


def test_a_structural_problem_is_named_by_its_key(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: MALFORMED["time slicing is a list"]})
    assert finding.found == "sharing.timeSlicing: a list, not a mapping"
    assert finding.expected == f"a device plugin config (api/config/v1) in {DEFAULT_PATH}"


def test_a_yaml_alias_bomb_is_reported_in_one_short_line_at_once(tmp_path):
    plan = plan_for(tmp_path, "shared", time_slicing_replicas=4)
    # x8 is 10**9 strings when expanded; the check must name it without expanding it.
    bomb = "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n"
    bomb += "".join(f"x{n}: &x{n} [{', '.join([f'*x{n - 1}'] * 10)}]\n" for n in range(1, 9))
    text = bomb + device_plugin.render(plan).replace("version: v1", "version: *x8")
    started = time.monotonic()
    [finding] = device_plugin.check(plan, {DEFAULT_PATH: text})
    assert finding.found == "version: a list"
    assert time.monotonic() - started < 5


# --- NVIDIA's own parser (the real plugin, ../shared/bin) agrees


def plugin_reading(tmp_path, text: str) -> dict | str:
    """The effective config the real plugin prints for ``text``, or the line refusing it."""
    config = tmp_path / "config.yaml"
    config.write_text(text)
    done = subprocess.run(
        [str(upstream_binary("nvidia-device-plugin")), "--config-file", str(config)]
        + ["--kubelet-socket", ""],
        capture_output=True,
        text=True,
        timeout=60,
        env=without_driver(),  # only its reading of the file: no NVML behind it
    )
    out = done.stdout + done.stderr
    if "Running with config:" not in out:
        # A file it cannot parse, or flags it refuses (validateFlags: MPS rules).
        refusals = ("unable to load config", "unable to validate flags")
        [error] = [line for line in out.splitlines() if any(r in line for r in refusals)]
        return error
    after = out.split("Running with config:", 1)[1].lstrip()
    return json.JSONDecoder().raw_decode(after)[0]


@pytest.mark.parametrize("name", [n for n in VARIANTS if not n.startswith("whole")])
def test_the_real_plugin_runs_with_what_the_deploy_writes(tmp_path, name):
    mode, data = VARIANTS[name]
    plan = plan_for(tmp_path, mode, **data)
    effective = plugin_reading(tmp_path, device_plugin.render(plan))
    assert isinstance(effective, dict), effective
    assert effective["flags"]["migStrategy"] == (plan.mig_strategy or "none")
    if plan.sharing:
        key = "mps" if plan.sharing.strategy == "mps" else "timeSlicing"
        slicing = effective["sharing"][key]
        assert slicing.get("renameByDefault", False) == plan.sharing.rename
        assert slicing["failRequestsGreaterThanOne"] == (
            plan.sharing.fail_requests_greater_than_one
        )
        assert slicing["resources"][0]["replicas"] == plan.sharing.replicas
        if key == "mps":
            assert effective["flags"]["mpsRoot"] == plan.sharing.mps_root
        else:
            assert not effective["flags"].get("mpsRoot")


@pytest.mark.parametrize("name", list(MALFORMED))
def test_the_real_plugin_refuses_what_the_check_reports(tmp_path, name):
    assert isinstance(plugin_reading(tmp_path, MALFORMED[name]), str)


# The rules the plugin enforces on MPS, as the plugin says them; the planner refuses each first.
PLUGIN_MPS_REFUSALS = {
    "replicas below 2": (
        "none",
        "  mpsRoot: /run/nvidia/mps\n",
        1,
        "number of replicas must be >= 2",
    ),
    "no mpsRoot": ("none", "", 4, "using MPS requires --mps-root to be specified"),
    "MIG mixed": (
        "mixed",
        "  mpsRoot: /run/nvidia/mps\n",
        4,
        "using --mig-strategy=mixed is not supported with MPS",
    ),
}


@pytest.mark.parametrize("name", list(PLUGIN_MPS_REFUSALS))
def test_the_real_plugin_refuses_mps_configs_gpuprov_never_writes(tmp_path, name):
    strategy, root, replicas, message = PLUGIN_MPS_REFUSALS[name]
    text = (
        f"version: v1\nflags:\n  migStrategy: {strategy}\n{root}sharing:\n  mps:\n"
        f"    resources:\n      - name: nvidia.com/gpu\n        replicas: {replicas}\n"
    )
    refusal = plugin_reading(tmp_path, text)
    assert isinstance(refusal, str) and message in refusal


def test_the_real_plugin_keeps_an_explicit_false_request_limit_and_forces_an_unset_one(tmp_path):
    plan = plan_for(
        tmp_path,
        "shared",
        time_slicing_replicas=4,
        sharing_strategy="mps",
        time_slicing_fail_requests_greater_than_one=False,
    )
    text = device_plugin.render(plan)
    assert plugin_reading(tmp_path, text)["sharing"]["mps"]["failRequestsGreaterThanOne"] is False
    unset = text.replace("    failRequestsGreaterThanOne: false\n", "")
    assert plugin_reading(tmp_path, unset)["sharing"]["mps"]["failRequestsGreaterThanOne"] is True
