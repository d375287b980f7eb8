"""A reboot of the MIG host on the lab: instances do not survive it (the simulated driver's boot
unit clears them) and gpuprov-mig.service builds the planned layout again before the kubelet."""

from __future__ import annotations

import json

import pytest

from gpuprov.contract import MIG_UNIT
from gpuprov.lab.testing import observed_instances, planned_instances

pytestmark = pytest.mark.lab


def test_after_a_reboot_the_boot_unit_rebuilds_the_layout_and_verify_passes(lab, deployed):
    host = lab.in_group("mig")[0].name

    lab.reboot(host)

    result = lab.verify()
    assert result.returncode == 0, result.stdout + result.stderr
    assert observed_instances(lab.probe(host)) == planned_instances(lab.plan()[host])
    # The boot unit's report of this boot: it created the instances the reboot had cleared.
    report = json.loads(lab.run(host, f"journalctl -b -o cat _SYSTEMD_UNIT={MIG_UNIT}").stdout)
    created = [a for g in report["gpus"] for a in g["actions"] if a["action"] == "create"]
    assert report["changed"] and report["error"] is None
    assert len(created) == sum(map(len, planned_instances(lab.plan()[host]).values()))
    assert all(a["ci"] is not None for a in created)
