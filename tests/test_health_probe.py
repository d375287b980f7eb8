"""The probe's health section, read through the real pynvml over the simulated driver: each
field on A100, H100 and H200 (row remapping) and T4 (page retirement), the kernel log's XIDs
mapped to GPUs by bus id, and a kernel log read that stays bounded whatever is in its place."""

from __future__ import annotations

import json
import os
import threading

import pytest
from click.testing import CliRunner
from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.contract import SIM_ENV
from simulated import (
    carve,
    clear_kernel_log,
    kernel_log_path,
    log_kernel_line,
    new_host,
    run_program,
)

from gpuprov.cli import main
from gpuprov.core.checks.probe_document import schema_problems
from gpuprov.host.agent import probe
from gpuprov.host.health import kernel_log as host_kernel_log
from gpuprov.host.health.xid import line as xid_line

ROW_REMAPPING_MODELS = ["A100-80GB", "H100-80GB", "H200-141GB"]


def sim(path: str, *args: str) -> None:
    assert run_program("gpuprov-sim", ["--state", path, *args]) == 0


def health(monkeypatch, path: str) -> dict:
    monkeypatch.setenv(SIM_ENV, path)
    document = probe.probe(health=True, kernel_log_path=kernel_log_path(path))
    assert schema_problems(document) == []
    return document["health"]


@pytest.mark.parametrize("model", ROW_REMAPPING_MODELS)
def test_a_healthy_gpu_reads_zero_counts_and_no_page_retirement(model, tmp_path, monkeypatch):
    path = new_host(tmp_path, model, 2)
    clear_kernel_log(path)
    found = health(monkeypatch, path)
    assert found["kernel_log"] == {
        "path": kernel_log_path(path),
        "error": None,
        "truncated": False,
    }
    assert found["gpus"][1] == {
        "index": 1,
        "ecc_uncorrected": {"volatile": 0, "aggregate": 0},
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "retired_pages": "not-supported",
        "xids": [],
    }
    assert found["other_xids"] == []


@pytest.mark.parametrize("model", ROW_REMAPPING_MODELS)
def test_uncorrectable_ecc_errors_show_volatile_and_aggregate(model, tmp_path, monkeypatch):
    path = new_host(tmp_path, model, 2)
    sim(path, "set-ecc", "--gpu", "1", "--uncorrected", "3", "--uncorrected-aggregate", "7")
    gpus = health(monkeypatch, path)["gpus"]
    assert gpus[1]["ecc_uncorrected"] == {"volatile": 3, "aggregate": 7}
    assert gpus[0]["ecc_uncorrected"] == {"volatile": 0, "aggregate": 0}


@pytest.mark.parametrize("model", ROW_REMAPPING_MODELS)
def test_a_pending_row_remap_and_a_failure_are_read(model, tmp_path, monkeypatch):
    path = new_host(tmp_path, model, 2)
    sim(path, "remap-pending", "--gpu", "0", "--failure")
    rows = health(monkeypatch, path)["gpus"][0]["remapped_rows"]
    assert rows == {"corrected": 0, "uncorrected": 1, "pending": True, "failure": True}


@pytest.mark.parametrize("model", ROW_REMAPPING_MODELS)
def test_an_xid_is_mapped_to_its_gpu_by_bus_id(model, tmp_path, monkeypatch):
    path = new_host(tmp_path, model, 3)
    sim(path, "inject", "xid", "79", "--gpu", "2")
    sim(path, "inject", "xid", "79", "--gpu", "2")
    sim(path, "inject", "xid", "13", "--gpu", "0", "--pid", "4242", "--name", "python3")
    gpus = health(monkeypatch, path)["gpus"]
    assert [(x["code"], x["count"]) for x in gpus[2]["xids"]] == [(79, 2)]
    assert gpus[2]["xids"][0]["last"].startswith("NVRM: Xid (PCI:0000:27:00): 79, ")
    assert [(x["code"], x["count"]) for x in gpus[0]["xids"]] == [(13, 1)]
    assert gpus[1]["xids"] == []


def test_remapped_rows_are_not_supported_on_a_mig_gpu_with_instances(tmp_path, monkeypatch):
    path = new_host(tmp_path, "H100-80GB", 2, mig=[0])
    carve(path, {0: [(19, [0])]})
    gpus = health(monkeypatch, path)["gpus"]
    assert gpus[0]["remapped_rows"] == "not-supported"
    assert gpus[1]["remapped_rows"]["pending"] is False


def test_a_page_retirement_gpu_reads_retired_pages_and_no_remapping(tmp_path, monkeypatch):
    path = new_host(tmp_path, "T4", 1)
    sim(path, "retire-page", "--gpu", "0", "--double-bit", "--pending")
    sim(path, "retire-page", "--gpu", "0")
    [gpu] = health(monkeypatch, path)["gpus"]
    assert gpu["retired_pages"] == {"single_bit": 1, "double_bit": 1, "pending": True}
    assert gpu["remapped_rows"] == "not-supported"


def test_a_reboot_clears_the_kernel_log_pending_remaps_and_volatile_counts(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 1)
    sim(path, "inject", "xid", "79", "--gpu", "0")
    sim(path, "set-ecc", "--gpu", "0", "--uncorrected", "2")
    sim(path, "remap-pending", "--gpu", "0")
    sim(path, "boot")
    [gpu] = health(monkeypatch, path)["gpus"]
    assert gpu["xids"] == []
    assert gpu["ecc_uncorrected"] == {"volatile": 0, "aggregate": 2}
    assert gpu["remapped_rows"]["pending"] is False
    assert gpu["remapped_rows"]["uncorrected"] == 1  # the remapping is active now


def test_an_xid_on_a_bus_nvml_does_not_list_is_kept_apart(tmp_path, monkeypatch):
    path = new_host(tmp_path, "H200-141GB", 1)
    log_kernel_line(path, "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.")
    log_kernel_line(path, "NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014")  # not an XID
    found = health(monkeypatch, path)
    assert found["gpus"][0]["xids"] == []
    assert [(x["pci_bus_id"], x["code"], x["count"]) for x in found["other_xids"]] == [
        ("0000:3b:00", 79, 1)
    ]


def test_without_a_driver_the_kernel_log_is_still_read(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 1)
    sim(path, "inject", "xid", "79", "--gpu", "0")
    sim(path, "driver", "--unloaded")
    monkeypatch.setenv(SIM_ENV, path)
    document = probe.probe(health=True, kernel_log_path=kernel_log_path(path))
    assert document["nvml"] == "driver-not-loaded"
    assert [x["code"] for x in document["health"]["other_xids"]] == [79]


def test_the_probe_reads_no_health_unless_asked(tmp_path, monkeypatch):
    monkeypatch.setenv(SIM_ENV, new_host(tmp_path, "A100-80GB", 1))
    assert "health" not in probe.probe()


def test_a_missing_kernel_log_is_an_error_not_a_failure(tmp_path):
    log = host_kernel_log.read(str(tmp_path / "kmsg"))
    assert (log.error, log.xids) == (f"no {tmp_path / 'kmsg'}", [])


def test_a_kernel_log_larger_than_the_limit_is_cut_and_said_so(tmp_path):
    path = tmp_path / "kmsg"
    record = b"3,0,1,-;NVRM: Xid (PCI:0000:07:00): 79, pid=0, name=, GPU has fallen off the bus\n"
    path.write_bytes(record * 2000)
    log = host_kernel_log.read(str(path), limit=len(record) * 100)
    assert log.truncated
    assert 0 < len(log.xids) <= 100


def test_a_fifo_in_place_of_the_kernel_log_does_not_hang_the_probe(tmp_path):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    done = threading.Event()
    result = {}

    def read():
        result["log"] = host_kernel_log.read(str(fifo))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO with no writer blocked"
    assert "neither the kernel's device nor a file" in result["log"].error


def test_the_hosts_own_dev_kmsg_is_read_without_blocking():
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("this machine does not let the tests read /dev/kmsg")
    done = threading.Event()
    result = {}

    def read():
        result["log"] = host_kernel_log.read()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "reading /dev/kmsg blocked at its end"
    assert result["log"].error is None


def test_gpuprov_probe_health_prints_the_section(tmp_path, monkeypatch):
    monkeypatch.setenv(SIM_ENV, new_host(tmp_path, "H200-141GB", 1))
    result = CliRunner().invoke(main, ["probe", "--health"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert schema_problems(document) == []
    assert document["health"]["gpus"][0]["retired_pages"] == "not-supported"


def test_an_ecc_count_past_nvmls_64_bits_is_refused_by_the_simulated_driver(tmp_path, capsys):
    # Before: 2**64 was stored, and the ctypes out-parameter wrapped it to 0: a healthy GPU.
    path = new_host(tmp_path, "A100-80GB", 1)
    assert (
        run_program(
            "gpuprov-sim", ["--state", path, "set-ecc", "--gpu", "0", "--uncorrected", str(2**64)]
        )
        == 2
    )
    assert "a count of at most 18446744073709551615" in capsys.readouterr().err
    with open(path) as f:
        assert json.load(f)["gpus"][0]["health"]["ecc"]["uncorrected"]["volatile"] == 0


def test_the_largest_counts_nvml_gives_are_read_exactly(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 2)
    clear_kernel_log(path)
    sim(path, "set-ecc", "--gpu", "0", "--uncorrected", str(2**64 - 1))
    with sim_state.transaction(path) as current:
        current["gpus"][1]["health"]["remapped_rows"]["uncorrected"] = 2**32 - 1
    found = health(monkeypatch, path)  # and the schema accepts them
    assert found["gpus"][0]["ecc_uncorrected"] == {"volatile": 2**64 - 1, "aggregate": 2**64 - 1}
    assert found["gpus"][1]["remapped_rows"]["uncorrected"] == 2**32 - 1


def test_a_count_no_driver_could_report_never_reads_as_a_healthy_zero(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 1)
    with open(path) as f:
        written = json.load(f)
    written["gpus"][0]["health"]["remapped_rows"]["uncorrected"] = 2**32
    sim_state.write_new(path, written)
    monkeypatch.setenv(SIM_ENV, path)
    document = probe.probe(health=True, kernel_log_path=kernel_log_path(path))
    # The driver clamps what its type cannot hold: the count reads saturated, not wrapped to 0.
    assert document["nvml"] == "ok"
    assert document["health"]["gpus"][0]["remapped_rows"]["uncorrected"] == 2**32 - 1


def inject(path: str, gpu: int, *codes: int) -> None:
    for code in codes:
        sim(path, "inject", "xid", str(code), "--gpu", str(gpu))


def test_a_critical_xid_after_32_other_codes_is_kept_and_truncated_says_so(tmp_path, monkeypatch):
    # Before: XID 79 logged after 32 other codes was dropped and truncated stayed false.
    path = new_host(tmp_path, "A100-80GB", 2)
    clear_kernel_log(path)
    others = [c for c in range(1, 60) if c not in (48, 64, 74, 75, 79, 95, 119, 120, 140)][:40]
    inject(path, 0, *others, 79, 79)
    found = health(monkeypatch, path)
    codes = [x["code"] for x in found["gpus"][0]["xids"]]
    assert len(codes) == 33 and {"code": 79, "count": 2} == {
        k: v for k, v in found["gpus"][0]["xids"][codes.index(79)].items() if k != "last"
    }
    assert codes[:32] == sorted(others[:32])  # the first 32 others, in code order
    assert found["kernel_log"]["truncated"] is True
    assert found["critical_xids"] == [48, 64, 74, 75, 79, 95, 119, 120, 140]
    assert found["gpus"][1]["xids"] == []


def test_the_probe_keeps_the_codes_it_is_told_are_critical(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 1)
    clear_kernel_log(path)
    inject(path, 0, *range(1, 41), 94)
    monkeypatch.setenv(SIM_ENV, path)
    log = kernel_log_path(path)
    default = probe.probe(health=True, kernel_log_path=log)["health"]
    assert 94 not in [x["code"] for x in default["gpus"][0]["xids"]]
    told = probe.probe(health=True, kernel_log_path=log, critical_xids=(94,))["health"]
    assert 94 in [x["code"] for x in told["gpus"][0]["xids"]] and told["critical_xids"] == [94]


def test_critical_xids_on_buses_nvml_does_not_list_are_kept_past_the_cap(tmp_path, monkeypatch):
    path = new_host(tmp_path, "A100-80GB", 1)
    clear_kernel_log(path)
    for n in range(40):
        log_kernel_line(path, xid_line(f"00000000:{0x80 + n:02X}:00.0", 13))
    log_kernel_line(path, xid_line("00000000:C0:00.0", 79))
    found = health(monkeypatch, path)
    assert len(found["other_xids"]) == 33 and found["kernel_log"]["truncated"] is True
    assert found["other_xids"][-1]["pci_bus_id"] == "0000:c0:00"
    assert found["other_xids"][-1]["code"] == 79
