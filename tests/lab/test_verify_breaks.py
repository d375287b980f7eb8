"""What the deploy wrote, installed and enabled, broken on a deployed lab host, is found by
`gpuprov verify`, named by host and item; one deploy heals it all.

One deploy (the module's ``deployed``), then each break followed by a verify that must exit 1
naming the host and the item, then one deploy and a verify that exits 0.
"""

from __future__ import annotations

import json

import pytest

from gpuprov.core.packaging.profiles import TOOLKIT_PACKAGES
from gpuprov.host.contract import (
    APT_PIN_PATH,
    DRIVER_REPO,
    MIG_LAYOUT_PATH,
    MIG_UNIT,
    MIG_UNIT_PATH,
    NOUVEAU_BLACKLIST_PATH,
    apt_source_path,
)

pytestmark = pytest.mark.lab

OTHER_TOOLKIT = "1.18.0-1"  # the lab's repository has 1.17.8-1 (the plan's) and this one
TOOLKIT = " ".join(TOOLKIT_PACKAGES)

# (group of the host, what is done to it, the finding: check and a text its expected or found
# holds)
BREAKS = [
    ("shared", f"rm {APT_PIN_PATH}", "apt-pin", APT_PIN_PATH),
    ("shared", f"rm {NOUVEAU_BLACKLIST_PATH}", "nouveau-blacklist", NOUVEAU_BLACKLIST_PATH),
    ("shared", f"rm {apt_source_path(DRIVER_REPO)}", "apt-source", apt_source_path(DRIVER_REPO)),
    ("mig", f"rm {MIG_LAYOUT_PATH}", "mig-layout", "removed after the deploy wrote it"),
    ("mig", f"systemctl disable {MIG_UNIT}", "unit", f"{MIG_UNIT} enabled at boot"),
    ("mig", f"rm {MIG_UNIT_PATH} && systemctl daemon-reload", "mig-unit", MIG_UNIT_PATH),
    (
        "whole_card",
        f"apt-mark unhold {TOOLKIT} && DEBIAN_FRONTEND=noninteractive apt-get -qy "
        "--allow-downgrades install "
        + " ".join(f"{p}={OTHER_TOOLKIT}" for p in TOOLKIT_PACKAGES)
        + f" && apt-mark hold {TOOLKIT}",
        "package",
        f"nvidia-container-toolkit {OTHER_TOOLKIT}",
    ),
    ("whole_card", "apt-mark unhold nvidia-smi", "package-hold", "nvidia-smi held"),
]


def verify(lab) -> tuple[int, dict[str, list[dict]]]:
    result = lab.verify(None, "--format", "json")
    report = json.loads(result.stdout)
    return result.returncode, {h["name"]: h["findings"] for h in report["hosts"]}


def test_each_break_is_named_by_host_and_item_and_one_deploy_heals_them(lab, deployed):
    code, found = verify(lab)
    assert code == 0, found
    for group, command, check, item in BREAKS:
        host = lab.in_group(group)[0].name
        lab.run(host, command, timeout=300)
        code, found = verify(lab)
        assert code == 1, (command, found)
        named = [
            f
            for f in found[host]
            if f["check"] == check and item in f["expected"] + " " + f["found"]
        ]
        assert named and all(f["host"] == host for f in named), (command, found[host])
        assert all(f["hint"] for f in named)
    toolkit = next(f for f in found[lab.in_group("whole_card")[0].name] if f["check"] == "package")
    assert toolkit["expected"] == "nvidia-container-toolkit 1.17.8-1"

    lab.deploy()
    code, found = verify(lab)
    assert code == 0, found
    node = lab.testinfra(lab.in_group("whole_card")[0].name)
    assert node.package("nvidia-container-toolkit").version == "1.17.8-1"
