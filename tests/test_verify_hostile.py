"""`gpuprov verify` on malformed and hostile input (issue #11, "verify never crashes and never
lies"): each example is a finding for its host with exit 1, no traceback, and the other hosts are
still reported; nothing is read outside ``--snapshot-dir``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from probes import matching_probe

from gpuprov.cli import main
from gpuprov.cli.verify import hosts_summary, verify_report
from gpuprov.controller.inventory import load
from gpuprov.core.checks.host import compare
from gpuprov.core.findings import Finding
from gpuprov.core.plan import build
from gpuprov.host.contract import MIG_LAYOUT_PATH

HOSTS = ("h1", "h2", "h3")
DATA = {
    "gpu_model": "A100-80GB",
    "gpu_count": 2,
    "driver_version": "535.261.03",
    "time_slicing_replicas": 4,
    "kubelet_config_dir": "/etc/kubernetes/kubelet.conf.d",
}


class Fleet:
    """Three ``shared`` hosts and a snapshot directory where each one matches its plan."""

    def __init__(self, root: Path, hosts=HOSTS):
        self.inventory = root / "inventory.py"
        self.inventory.write_text(f"shared = [{', '.join(repr((h, DATA)) for h in hosts)}]\n")
        self.snapshots = root / "snapshots"
        self.snapshots.mkdir()
        self.plans = {p.name: p for p in build(load(str(self.inventory))).hosts}
        for name, plan in self.plans.items():
            if "/" not in name and len(name) < 200:
                self.save(name, matching_probe(plan))

    def save(self, host: str, document) -> None:
        (self.snapshots / f"{host}.json").write_text(json.dumps(document))

    def probe(self, host: str) -> dict:
        return matching_probe(self.plans[host])

    def verify(self) -> tuple[int, dict, str]:
        result = CliRunner().invoke(
            main, ["verify", str(self.inventory), "--snapshot-dir", str(self.snapshots)]
        )
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert "Traceback" not in result.output
        as_json = CliRunner().invoke(
            main,
            [
                "verify",
                str(self.inventory),
                "--snapshot-dir",
                str(self.snapshots),
                "--format",
                "json",
            ],
        )
        report = json.loads(as_json.stdout)
        assert as_json.exit_code == result.exit_code
        return result.exit_code, {h["name"]: h for h in report["hosts"]}, result.stdout


@pytest.fixture
def fleet(tmp_path):
    return Fleet(tmp_path)


def only_h2_drifts(fleet: Fleet, *checks: str) -> list[dict]:
    code, hosts, out = fleet.verify()
    assert code == 1
    assert {name: h["status"] for name, h in hosts.items()} == {
        "h1": "ok",
        "h2": "drift",
        "h3": "ok",
    }
    assert "3 hosts: 2 ok, 1 drift (h2), 0 unreachable" in out
    found = hosts["h2"]["findings"]
    assert found and {f["check"] for f in found} <= set(checks), found
    return found


def test_a_fleet_that_matches_exits_0(fleet):
    code, hosts, _ = fleet.verify()
    assert code == 0 and {h["status"] for h in hosts.values()} == {"ok"}


@pytest.mark.parametrize("index", ["1", None, 0, 1.0, True, -1, 7])
def test_mig_off_gpu_with_a_bad_index_is_not_ok(fleet, index):
    # Before: a GPU whose index is missing, a string or repeated was never compared, and a host
    # with MIG off and no instances reported ok.
    document = fleet.probe("h2")
    if index is None:
        del document["gpus"][1]["index"]
    else:
        document["gpus"][1]["index"] = index
    fleet.save("h2", document)
    only_h2_drifts(fleet, "probe-document")


def test_a_gpu_with_mig_left_on_is_found_whatever_order_the_probe_lists_them(fleet):
    document = fleet.probe("h2")
    document["gpus"].reverse()
    document["gpus"][0]["mig"] = {"current": False, "pending": True}  # GPU 1
    fleet.save("h2", document)
    [finding] = only_h2_drifts(fleet, "leftover")
    assert finding["gpu"] == 1


def test_a_snapshot_without_files_is_not_ok(fleet):
    document = fleet.probe("h2")
    del document["files"]
    fleet.save("h2", document)
    [finding] = only_h2_drifts(fleet, "probe-document")
    assert finding["found"] == "no files section"
    assert "probe --file" in finding["hint"]


def test_a_snapshot_missing_one_wanted_file_is_not_ok(fleet):
    document = fleet.probe("h2")
    del document["files"]["/etc/nvidia/device-plugin/config.yaml"]
    fleet.save("h2", document)
    [finding] = only_h2_drifts(fleet, "probe-document")
    assert finding["found"] == "not read: /etc/nvidia/device-plugin/config.yaml"


def test_device_plugin_config_with_time_slicing_a_list(fleet):
    document = fleet.probe("h2")
    document["files"]["/etc/nvidia/device-plugin/config.yaml"] = (
        "version: v1\nsharing:\n  timeSlicing: [1]\n"
    )
    fleet.save("h2", document)
    found = only_h2_drifts(fleet, "device-plugin")
    assert "sharing.timeSlicing: a list, not a mapping" in [f["found"] for f in found]


@pytest.mark.parametrize(
    "text",
    [
        "version = [2]\n",
        'version = "2"\n',
        "version = 2\nimports = 5\n",
        "version = 2\nimports = [1]\n",
    ],
)
def test_containerd_main_file_with_a_malformed_value(fleet, text):
    document = fleet.probe("h2")
    document["files"]["/etc/containerd/config.toml"] = text
    fleet.save("h2", document)
    only_h2_drifts(fleet, "container-runtime", "check-failed")


@pytest.mark.parametrize(
    "layout",
    [
        "[]",
        '{"gpus": 5}',
        '{"gpus": [{"index": 0, "instances": 5}]}',
        '{"gpus": [{"index": [0], "instances": [{"start": {}}]}]}',
        "{not json",
    ],
)
def test_a_hand_edited_mig_layout_file_is_a_finding(tmp_path, layout):
    inventory = tmp_path / "inventory.py"
    data = {**DATA, "mig_layout": {"3g.40gb": 2}}
    del data["time_slicing_replicas"]
    inventory.write_text(f"mig = [('m1', {data!r})]\n")
    [plan] = build(load(str(inventory))).hosts
    document = matching_probe(plan)
    assert compare(plan, document) == []
    document["files"][MIG_LAYOUT_PATH] = layout
    findings = compare(plan, document)
    assert findings and {f.check for f in findings} <= {"mig-layout", "check-failed"}, findings


def test_not_json_not_utf8_too_deep_or_not_an_object_is_that_hosts_finding(fleet):
    for text in (b"{not json", b"\xff\xfe{}", b"[" * 100_000, b"[1, 2]", b"null", b"1e999999"):
        (fleet.snapshots / "h2.json").write_bytes(text)
        only_h2_drifts(fleet, "probe-document", "agent")


@pytest.mark.parametrize("name", ["../x", "/abs", "a" * 300, ".."])
def test_host_names_cannot_leave_the_snapshot_dir(tmp_path, name):
    fleet = Fleet(tmp_path, hosts=("h1", name))
    # A valid snapshot where the name would lead: it must not be read.
    outside = (fleet.snapshots / f"{name}.json") if len(name) < 200 else None
    if outside is not None and name != "..":
        outside.parent.mkdir(parents=True, exist_ok=True)
        outside.write_text(json.dumps(matching_probe(fleet.plans[name])))
    code, hosts, out = fleet.verify()
    assert code == 1 and hosts["h1"]["status"] == "ok"
    [finding] = hosts[name]["findings"]
    assert finding["check"] == "snapshot" and hosts[name]["status"] == "drift"


def test_control_characters_from_a_host_cannot_forge_report_lines():
    forged = "h1\nerror: all hosts ok"
    results = {forged: [Finding(forged, None, "nvml", "ok", "error\r\nok", "x")]}
    summary = hosts_summary(results)
    assert "\n" not in summary and "h1\\nerror" in summary
    assert verify_report(results)["hosts"][0]["name"] == forged  # JSON escapes it itself


@pytest.mark.parametrize(
    "path",
    [
        "/etc/nvidia/device-plugin/config.yaml",
        "/etc/kubernetes/kubelet.conf.d/50-gpuprov.conf",
        "/var/lib/kubelet/config.yaml",
    ],
)
def test_a_file_the_probe_would_not_read_is_a_finding_naming_why(fleet, path):
    document = fleet.probe("h2")
    document["files"][path] = {"error": "larger than 1 MiB"}
    fleet.save("h2", document)
    found = only_h2_drifts(fleet, "device-plugin", "kubelet-max-pods")
    assert "not read by the probe: larger than 1 MiB" in [f["found"] for f in found]


def health_section(document: dict) -> dict:
    """A health section of healthy A100s for ``document``'s GPUs, as the probe writes it."""
    return {
        "kernel_log": {"path": "/dev/kmsg", "error": None, "truncated": False},
        "gpus": [
            {
                "index": gpu["index"],
                "ecc_uncorrected": {"volatile": 0, "aggregate": 0},
                "remapped_rows": {
                    "corrected": 0,
                    "uncorrected": 0,
                    "pending": False,
                    "failure": False,
                },
                "retired_pages": "not-supported",
                "xids": [],
            }
            for gpu in document["gpus"]
        ],
        "other_xids": [],
    }


XID_13 = {"code": 13, "count": 1, "last": "NVRM: Xid (PCI:0000:07:00): 13, pid=1, ..."}


@pytest.mark.parametrize(
    "tamper, check, found",
    [
        (
            lambda d: d["health"]["gpus"].append(dict(d["health"]["gpus"][1])),
            "probe-document",
            "health.gpus[2].index: 1 again",
        ),
        (
            lambda d: d["health"]["gpus"][0]["xids"].extend([XID_13, {**XID_13, "count": 4}]),
            "probe-document",
            "health.gpus[0].xids[1].code: 13 again (health.gpus[0].xids[0])",
        ),
        (
            lambda d: d["health"]["other_xids"].extend(
                [{**XID_13, "pci_bus_id": "0000:3b:00"}, {**XID_13, "pci_bus_id": "0000:3b:00"}]
            ),
            "probe-document",
            "health.other_xids[1].code: 13 again (health.other_xids[0])",
        ),
        (
            lambda d: d["kubelet_devices"].update(directory="/tmp/elsewhere"),
            "kubelet-devices",
            "read from /tmp/elsewhere",
        ),
        (
            lambda d: d["containerd"]["dump"].update(ok="false"),
            "probe-document",
            'containerd.dump.ok: "false" is not true or false',
        ),
        (
            lambda d: d["containerd"]["version"].update(ok=False),
            "container-runtime",
            "failed: containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3",
        ),
        (
            lambda d: d["containerd"].update(version={"ok": True}),
            "probe-document",
            "containerd.version: missing text",
        ),
    ],
)
def test_a_probe_section_verify_cannot_trust_is_never_ok(fleet, tamper, check, found):
    # Before: each of these snapshots verified ok (exit 0).
    document = fleet.probe("h2")
    document["health"] = health_section(document)
    fleet.save("h2", document)
    assert fleet.verify()[0] == 0
    tamper(document)
    fleet.save("h2", document)
    findings = only_h2_drifts(fleet, check)
    assert found in [f["found"] for f in findings], findings


@pytest.mark.parametrize(
    "checkpoint, said",
    [
        ("[" * 100_000 + "]" * 100_000, "malformed: nested too deep"),
        (
            '{"Data": {"PodDeviceEntries": null, "RegisteredDevices": {}}, "Checksum": '
            + "9" * 5000
            + "}",
            "malformed: not the kubelet's checkpoint: Exceeds the limit",
        ),
    ],
)
def test_a_deep_or_5000_digit_kubelet_checkpoint_is_a_finding(fleet, checkpoint, said):
    document = fleet.probe("h2")
    document["kubelet_devices"]["checkpoint"] = checkpoint
    fleet.save("h2", document)
    [finding] = only_h2_drifts(fleet, "kubelet-checkpoint")
    assert said in finding["found"]
