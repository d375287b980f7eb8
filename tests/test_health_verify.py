"""Verify's GPU health findings: an XID, ECC errors, a pending or failed row remap and a pending
page retirement each name host, GPU, UUID and evidence; --health off and older documents
without a health section judge nothing; the critical XIDs come from group data."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from gpuprov_lab.sim.contract import SIM_ENV
from plans import plan_for
from probes import matching_probe
from simulated import clear_kernel_log, kernel_log_path, new_host, run_program

from gpuprov.cli import main
from gpuprov.core.checks.host import compare
from gpuprov.host.agent import probe


def observed(tmp_path, monkeypatch, plan, *faults: list[str]) -> dict:
    """``plan``'s matching probe document with the health section the real probe reads from a
    simulated host of the same GPUs after ``faults`` (gpuprov-sim command lines)."""
    path = new_host(tmp_path, "A100-80GB", plan.gpu_count)
    clear_kernel_log(path)
    for fault in faults:
        assert run_program("gpuprov-sim", ["--state", path, *fault]) == 0
    monkeypatch.setenv(SIM_ENV, path)
    read = probe.probe(health=True, kernel_log_path=kernel_log_path(path))
    document = matching_probe(plan)
    document["health"] = read["health"]
    return document


def health_findings(findings) -> list[tuple]:
    return [(f.gpu, f.check, f.found) for f in findings]


def test_an_xid_79_is_a_finding_naming_gpu_uuid_code_and_meaning(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan, ["inject", "xid", "79", "--gpu", "1"])
    [finding] = compare(plan, document)
    uuid = document["gpus"][1]["uuid"]
    assert (finding.host, finding.gpu, finding.check) == ("n1", 1, "xid")
    assert finding.found == f"{uuid}: XID 79 (GPU has fallen off the bus), 1 time since boot"
    assert "drain the node" in finding.hint


def test_a_pending_row_remap_says_reset_required(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan, ["remap-pending", "--gpu", "0"])
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (0, "row-remapping")
    assert finding.found.startswith(f"{document['gpus'][0]['uuid']}: reset required for row ")
    assert "reset GPU 0" in finding.hint


def test_a_failed_row_remap_and_ecc_errors_are_each_a_finding(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(
        tmp_path,
        monkeypatch,
        plan,
        ["remap-pending", "--gpu", "1", "--failure"],
        ["set-ecc", "--gpu", "0", "--uncorrected", "2"],
    )
    found = [(f.gpu, f.check) for f in compare(plan, document)]
    assert found == [(0, "ecc"), (1, "row-remapping"), (1, "row-remapping")]


def test_a_pending_page_retirement_is_a_finding(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan)
    document["health"]["gpus"][0]["retired_pages"] = {
        "single_bit": 0,
        "double_bit": 1,
        "pending": True,
    }
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (0, "retired-pages")
    assert "waits for a driver reload" in finding.found


def test_a_non_critical_xid_is_not_a_finding_unless_group_data_says_so(tmp_path, monkeypatch):
    fault = ["inject", "xid", "13", "--gpu", "0"]
    plan = plan_for(tmp_path, "whole_card")
    assert compare(plan, observed(tmp_path, monkeypatch, plan, fault)) == []
    strict = plan_for(tmp_path, "whole_card", health_critical_xids=[13, 79])
    [finding] = compare(strict, observed(tmp_path, monkeypatch, strict, fault))
    assert "XID 13 (graphics engine exception" in finding.found
    relaxed = plan_for(tmp_path, "whole_card", health_critical_xids=[])
    fault79 = ["inject", "xid", "79", "--gpu", "0"]
    assert compare(relaxed, observed(tmp_path, monkeypatch, relaxed, fault79)) == []


def test_health_off_judges_nothing(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan, ["inject", "xid", "79", "--gpu", "1"])
    assert compare(plan, document, health=False) == []


def test_a_document_without_health_still_loads_and_judges_no_health(tmp_path):
    plan = plan_for(tmp_path, "whole_card")
    assert compare(plan, matching_probe(plan)) == []


def test_an_unread_kernel_log_is_a_host_finding(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan)
    document["health"]["kernel_log"]["error"] = "cannot open /dev/kmsg: Permission denied"
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (None, "xid")
    assert "as root" in finding.hint


def test_an_xid_for_a_gpu_gone_from_nvml_is_a_host_finding(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan)
    document["health"]["other_xids"] = [
        {"pci_bus_id": "0000:3b:00", "code": 79, "count": 1, "last": "NVRM: Xid ..."}
    ]
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (None, "xid")
    assert finding.found.startswith("PCI 0000:3b:00 (no GPU NVML lists): XID 79")


def test_a_malformed_health_section_is_a_document_finding_not_a_crash(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan)
    document["health"]["gpus"][0]["xids"] = [{"code": "79", "count": 1, "last": ""}]
    [finding] = compare(plan, document)
    assert finding.check == "probe-document"
    assert finding.found == 'health.gpus[0].xids[0].code: "79" is not an integer'


@pytest.mark.parametrize(
    "value, message",
    [
        (["79"], "must be a list of XID codes"),
        ([0], "XID code 0 is not in 1..65535"),
        ("79", "must be a list of XID codes"),
    ],
)
def test_a_bad_critical_xid_list_is_exit_2_naming_the_key(tmp_path, value, message):
    inventory = tmp_path / "inv.py"
    data = {"gpu_model": "A100-80GB", "gpu_count": 1, "health_critical_xids": value}
    inventory.write_text(f"whole_card = [('n1', {data!r})]\n")
    result = CliRunner().invoke(main, ["plan", str(inventory)])
    assert result.exit_code == 2, result.output
    assert "health_critical_xids" in result.output and message in result.output


def snapshot_verify(tmp_path, document, *args) -> tuple[int, dict]:
    inventory = tmp_path / "snap.py"
    data = {"gpu_model": "A100-80GB", "gpu_count": 2, "driver_version": "535.261.03"}
    data["kubelet_config_dir"] = "/etc/kubernetes/kubelet.conf.d"
    inventory.write_text(f"whole_card = [('n1', {data!r})]\n")
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(exist_ok=True)
    (snapshots / "n1.json").write_text(json.dumps(document))
    result = CliRunner().invoke(
        main,
        ["verify", str(inventory), "--snapshot-dir", str(snapshots), "--format", "json", *args],
    )
    return result.exit_code, json.loads(result.stdout) if result.stdout.startswith("{") else {}


def test_verify_exits_1_on_an_xid_and_0_with_health_off(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(tmp_path, monkeypatch, plan, ["inject", "xid", "79", "--gpu", "0"])
    code, report = snapshot_verify(tmp_path, document)
    assert code == 1
    [finding] = report["hosts"][0]["findings"]
    assert (finding["host"], finding["gpu"], finding["check"]) == ("n1", 0, "xid")
    code, _ = snapshot_verify(tmp_path, document, "--health", "off")
    assert code == 0


def test_cordon_unhealthy_without_a_kubeconfig_is_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["verify", "inv.py", "--cordon-unhealthy"])
    assert result.exit_code == 2
    assert "error: --cordon-unhealthy: needs --kubeconfig" in result.output


def observed_model(tmp_path, monkeypatch, plan, model: str) -> dict:
    """``plan``'s matching probe document with the health section the real probe reads from a
    simulated host of ``plan.gpu_count`` GPUs of ``model``."""
    path = new_host(tmp_path, model, plan.gpu_count, seed=f"health-{model}")
    clear_kernel_log(path)
    monkeypatch.setenv(SIM_ENV, path)
    read = probe.probe(health=True, kernel_log_path=kernel_log_path(path))
    document = matching_probe(plan)
    for gpu, seen in zip(document["gpus"], read["gpus"], strict=True):
        gpu.update(name=seen["name"], memory_total_mib=seen["memory_total_mib"])
        gpu.update(pci_bus_id=seen["pci_bus_id"])
    document["health"] = read["health"]
    return document


@pytest.mark.parametrize(
    "model, reading",
    [
        ("A100-80GB", "ecc_uncorrected"),
        ("A100-80GB", "remapped_rows"),
        ("H200-141GB", "remapped_rows"),
        ("H200-141GB", "ecc_uncorrected"),
        ("T4", "retired_pages"),
    ],
)
def test_not_supported_where_the_model_answers_is_a_finding(tmp_path, monkeypatch, model, reading):
    # Before: a snapshot saying "not-supported" for ECC on an A100, or for row remapping on an
    # A100 or H200 without MIG, was ok: the GPU's memory health unknown, verify exit 0.
    plan = plan_for(tmp_path, "whole_card", gpu_model=model)
    document = observed_model(tmp_path, monkeypatch, plan, model)
    assert compare(plan, document) == []  # the simulated driver answers as the model does
    document["health"]["gpus"][1][reading] = "not-supported"
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (1, "health")
    assert finding.found == f"{document['gpus'][1]['uuid']}: {reading} not-supported"
    assert f"a {model} reports it" in finding.expected
    code, _ = snapshot_verify_model(tmp_path, document, model)
    assert code == 1


def test_not_supported_where_the_model_does_not_answer_is_no_finding(tmp_path, monkeypatch):
    # Row remapping on a MIG GPU with instances (NVML: not supported there); page retirement on
    # an Ampere GPU; row remapping on a T4.
    mig = plan_for(tmp_path, "mig", mig_layout={"3g.40gb": 2})
    document = observed_model(tmp_path, monkeypatch, mig, "A100-80GB")
    for gpu in document["health"]["gpus"]:
        gpu["remapped_rows"] = "not-supported"
    assert compare(mig, document) == []
    t4 = plan_for(tmp_path, "whole_card", gpu_model="T4")
    document = observed_model(tmp_path, monkeypatch, t4, "T4")
    assert {g["remapped_rows"] for g in document["health"]["gpus"]} == {"not-supported"}
    assert compare(t4, document) == []


def snapshot_verify_model(tmp_path, document, model: str) -> tuple[int, dict]:
    inventory = tmp_path / "snap-model.py"
    data = {"gpu_model": model, "gpu_count": 2, "driver_version": "535.261.03"}
    data["kubelet_config_dir"] = "/etc/kubernetes/kubelet.conf.d"
    inventory.write_text(f"whole_card = [('n1', {data!r})]\n")
    snapshots = tmp_path / "snapshots-model"
    snapshots.mkdir(exist_ok=True)
    (snapshots / "n1.json").write_text(json.dumps(document))
    result = CliRunner().invoke(
        main, ["verify", str(inventory), "--snapshot-dir", str(snapshots), "--format", "json"]
    )
    return result.exit_code, json.loads(result.stdout)


def test_counts_at_nvmls_maximum_make_the_gpu_unhealthy(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    document = observed(
        tmp_path, monkeypatch, plan, ["set-ecc", "--gpu", "0", "--uncorrected", str(2**64 - 1)]
    )
    document["health"]["gpus"][1]["remapped_rows"]["uncorrected"] = 2**32 - 1
    found = [(f.gpu, f.check, f.found.split(": ", 1)[1]) for f in compare(plan, document)]
    assert found == [
        (
            0,
            "health",
            "ecc_uncorrected volatile, aggregate at 18446744073709551615, NVML's "
            "maximum: the count is saturated and the true count unknown",
        ),
        (
            0,
            "ecc",
            "18446744073709551615 uncorrectable ECC errors since the driver loaded "
            "(18446744073709551615 in the GPU's life)",
        ),
        (
            1,
            "health",
            "remapped_rows uncorrected at 4294967295, NVML's maximum: the count is "
            "saturated and the true count unknown",
        ),
    ]


def test_a_critical_xid_logged_after_many_others_is_still_a_finding(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card")
    faults = [["inject", "xid", str(c), "--gpu", "0"] for c in range(1, 41) if c != 13] + [
        ["inject", "xid", "79", "--gpu", "0"]
    ]
    document = observed(tmp_path, monkeypatch, plan, *faults)
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (0, "xid") and "XID 79" in finding.found


def test_a_truncated_document_that_may_lack_a_critical_xid_is_not_ok(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, "whole_card", health_critical_xids=[94])
    faults = [["inject", "xid", str(c), "--gpu", "0"] for c in range(1, 41)]
    document = observed(tmp_path, monkeypatch, plan, *faults)  # probed with the default codes
    [finding] = compare(plan, document)
    assert (finding.gpu, finding.check) == (None, "xid")
    assert "without keeping XID 94 whole: a critical one may be missing" in finding.found
    document["health"]["critical_xids"] = [94]  # a probe told the host's codes
    assert compare(plan, document) == []
