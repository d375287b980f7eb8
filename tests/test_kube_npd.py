"""`gpuprov kube render --node-problem-detector`: NPD's system log monitor config for the
critical XIDs, checked against NPD's own example (tests/data/npd, recorded from
kubernetes/node-problem-detector config/kernel-monitor.json) and against real XID lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.core.cluster import npd
from gpuprov.host.contract import NPD_CONFIGMAP_KEY
from gpuprov.host.health import xid

EXAMPLE = json.loads((Path(__file__).parent / "data" / "npd" / "kernel-monitor.json").read_text())


def test_the_config_has_only_keys_and_value_types_npds_example_has():
    ours = npd.config([79, 75])
    for key, value in ours.items():
        assert key in EXAMPLE, key
        assert type(value) is type(EXAMPLE[key]), key
    assert (ours["plugin"], ours["logPath"]) == (EXAMPLE["plugin"], EXAMPLE["logPath"])
    condition_keys = {frozenset(c) for c in EXAMPLE["conditions"]}
    assert all(frozenset(c) in condition_keys for c in ours["conditions"])
    rule_keys = {(r["type"], frozenset(r)) for r in EXAMPLE["rules"]}
    assert all((r["type"], frozenset(r)) in rule_keys for r in ours["rules"])
    conditions = {c["type"] for c in ours["conditions"]}
    assert {r["condition"] for r in ours["rules"] if r["type"] == "permanent"} <= conditions


def test_each_code_has_an_event_and_a_condition_rule_that_match_only_its_xid_line():
    rules = npd.config([75, 79])["rules"]
    assert [(r["type"], r["reason"]) for r in rules] == [
        ("temporary", "Xid75"),
        ("permanent", "Xid75"),
        ("temporary", "Xid79"),
        ("permanent", "Xid79"),
    ]
    line79 = xid.line("00000000:3B:00.0", 79, pid=1896, name="python3")
    real79 = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    line13 = xid.line("00000000:3B:00.0", 13)
    pattern79 = rules[2]["pattern"]
    # A rule matches the whole message, as NPD's own patterns (which end in .*) are written.
    assert re.fullmatch(pattern79, line79) and re.fullmatch(pattern79, real79)
    assert not re.fullmatch(pattern79, line13)
    assert not re.fullmatch(rules[0]["pattern"], line79)


def test_render_adds_the_configmap_with_the_inventorys_critical_xids(tmp_path):
    inventory = tmp_path / "inv.py"
    inventory.write_text(
        "whole_card = (['n1'], {'gpu_model': 'A100-80GB', 'gpu_count': 1, "
        "'health_critical_xids': [79, 75]})\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["kube", "render", str(inventory), "--out", str(out), "--node-problem-detector"]
    )
    assert result.exit_code == 0, result.output
    [config_map] = list(
        yaml.safe_load_all((out / "node-problem-detector-configmap.yaml").read_text())
    )
    config = json.loads(config_map["data"][NPD_CONFIGMAP_KEY])
    assert config == npd.config([75, 79])
    plain = CliRunner().invoke(main, ["kube", "render", str(inventory)])
    assert "node-problem-detector" not in plain.output
