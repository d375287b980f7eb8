"""A reboot of the MIG host on the lab: instances do not survive it (the simulated driver's boot
unit clears them) and gpuprov-mig.service builds the planned layout again before the kubelet."""

from __future__ import annotations

import json

import pytest
from gpuprov_lab.testing import observed_instances, planned_instances

from gpuprov.host.contract import AGENT_EXIT_BAD_INPUT, MIG_LAYOUT_PATH, MIG_UNIT

pytestmark = pytest.mark.lab


def test_after_a_reboot_the_boot_unit_rebuilds_the_layout_and_verify_passes(lab, deployed):
    host = lab.in_group("mig")[0].name

    lab.reboot(host)
    lab.wait_registered(host)

    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr
    assert observed_instances(lab.probe(host)) == planned_instances(lab.plan()[host])
    # The boot unit's report of this boot: it created the instances the reboot had cleared.
    report = json.loads(lab.run(host, f"journalctl -b -o cat _SYSTEMD_UNIT={MIG_UNIT}").stdout)
    created = [a for g in report["gpus"] for a in g["actions"] if a["action"] == "create"]
    assert report["changed"] and report["error"] is None
    assert len(created) == sum(map(len, planned_instances(lab.plan()[host]).values()))
    assert all(a["ci"] is not None for a in created)


def test_a_hand_edited_layout_breaking_mig_rules_is_refused_at_boot_and_nothing_changes(
    lab, deployed
):
    host = lab.in_group("mig")[0].name
    before = observed_instances(lab.probe(host))
    original = lab.run(host, f"cat {MIG_LAYOUT_PATH}").stdout
    document = json.loads(original)
    # A 3g.40gb moved to slots 2-5, where NVML allows none (its placements start at 0 or 4).
    document["gpus"][0]["instances"] = [
        {"profile": "3g.40gb", "profile_id": 9, "start": 2, "size": 4}
    ]
    lab.run(host, f"cat > {MIG_LAYOUT_PATH} <<'EOF'\n{json.dumps(document)}\nEOF")
    try:
        started = lab.run(host, f"systemctl restart {MIG_UNIT}", check=False)
        status = lab.run(host, f"systemctl show -p ExecMainStatus --value {MIG_UNIT}").stdout
        log = lab.run(host, f"journalctl -b -o cat -n 5 _SYSTEMD_UNIT={MIG_UNIT}").stdout
    finally:
        lab.run(host, f"cat > {MIG_LAYOUT_PATH} <<'EOF'\n{original}EOF")

    assert started.returncode != 0
    assert status.strip() == str(AGENT_EXIT_BAD_INPUT)
    assert "3g.40gb (id 9) cannot sit at slots 2-5" in log
    assert observed_instances(lab.probe(host)) == before
