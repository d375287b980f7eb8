"""The probe document's schema check: what the real probe prints passes, every other shape is
named by where it breaks the schema."""

from __future__ import annotations

import copy
import ctypes

import pynvml
import pytest
from gpuprov_lab.sim.contract import SIM_ENV
from simulated import initialized, new_host, use

from gpuprov.core.checks.probe_document import (
    MAX_SHOWN_PROBLEMS,
    missing_files,
    read,
    schema_problems,
)
from gpuprov.core.hostfiles import Wanted
from gpuprov.host.agent import probe
from gpuprov.host.contract import PROBE_SCHEMA


def real_probe(tmp_path, monkeypatch, **kwargs) -> dict:
    """The probe of two simulated A100s, GPU 0 with MIG on and two instances (one without CI)."""
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    use(path)
    with initialized():
        device = pynvml.nvmlDeviceGetHandleByIndex(0)
        for profile_id, start, size in ((9, 4, 4), (19, 0, 1)):
            placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                device, profile_id, ctypes.byref(placement)
            )
            if profile_id == 9:
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    monkeypatch.setenv(SIM_ENV, path)
    return probe.probe(**kwargs)


def test_what_the_real_probe_prints_passes(tmp_path, monkeypatch):
    document = real_probe(tmp_path, monkeypatch, files=["/nonexistent"], globs=["/etc/*.conf"])
    assert len(document["gpus"][0]["gpu_instances"]) == 2
    assert schema_problems(document) == []
    checked, findings = read("h", document, "/agent.pyz", "python3")
    assert findings == [] and checked.gpus[0]["index"] == 0


def good() -> dict:
    gpu = {
        "index": 0,
        "uuid": "GPU-0",
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_mib": 81920,
        "pci_bus_id": "00000000:07:00.0",
        "mig": {"current": True, "pending": True},
        "gpu_instances": [
            {
                "id": 1,
                "profile_id": 9,
                "profile": "3g.40gb",
                "start": 4,
                "size": 4,
                "compute_instances": [{"id": 0, "profile_id": 2, "slice_count": 3}],
            }
        ],
    }
    second = {
        **copy.deepcopy(gpu),
        "index": 1,
        "uuid": "GPU-1",
        "pci_bus_id": "00000000:0F:00.0",
        "mig": None,
        "gpu_instances": [],
    }
    return {
        "schema": PROBE_SCHEMA,
        "nvml": "ok",
        "error": None,
        "driver_version": "535.261.03",
        "nvml_version": "12.535.261.03",
        "gpus": [gpu, second],
        "files": {
            "/etc/x.yaml": "a: 1\n",
            "/etc/missing": None,
            "/etc/huge.toml": {"error": "larger than 1 MiB"},
        },
        "containerd": {
            "version": {
                "ok": True,
                "text": "containerd github.com/containerd/containerd/v2 v2.0.0 x",
            }
        },
        "packages": {
            "nvidia-driver": {"version": "535.261.03-1", "held": True},
            "nvidia-smi": {"version": None, "held": True},
        },
        "units": {"gpuprov-mig.service": {"enabled": "enabled", "active": "inactive"}},
        "pod_resources": {
            "socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
            "containers": [
                {
                    "pod": "p",
                    "namespace": "ns",
                    "container": "c",
                    "resource": "nvidia.com/gpu.shared",
                    "device_ids": ["GPU-0::1"],
                }
            ],
        },  # fmt: skip
    }


def test_the_good_example_passes():
    assert schema_problems(good()) == []


def edited(change) -> list[str]:
    document = good()
    change(document)
    return schema_problems(document)


CASES = {
    "index is a string": (
        lambda d: d["gpus"][1].update(index="1"),
        'gpus[1].index: "1" is not an integer',
    ),
    "index is missing": (lambda d: d["gpus"][1].pop("index"), "gpus[1]: missing index"),
    "index is true": (
        lambda d: d["gpus"][0].update(index=True),
        "gpus[0].index: true is not an integer",
    ),
    "index is negative": (
        lambda d: d["gpus"][0].update(index=-1),
        "gpus[0].index: -1 is not in 0..1023",
    ),
    "index twice": (
        lambda d: d["gpus"][1].update(index=0),
        "gpus[1].index: 0 again (gpus[0] has it)",
    ),
    "index gap": (
        lambda d: d["gpus"][1].update(index=5),
        "gpus: indices 0, 5: NVML numbers 2 GPUs 0..1",
    ),
    "uuid twice": (
        lambda d: d["gpus"][1].update(uuid="GPU-0"),
        'gpus[1].uuid: "GPU-0" again (gpus[0])',
    ),
    "bus id twice": (
        lambda d: d["gpus"][1].update(pci_bus_id="00000000:07:00.0"),
        'gpus[1].pci_bus_id: "00000000:07:00.0" again (gpus[0])',
    ),
    "empty uuid": (
        lambda d: d["gpus"][1].update(uuid=""),
        'gpus[1].uuid: "" is not a non-empty string',
    ),
    "mig is a string": (
        lambda d: d["gpus"][0].update(mig="on"),
        "gpus[0].mig: a string, not a JSON object",
    ),
    "mig current is a string": (
        lambda d: d["gpus"][0]["mig"].update(current="true"),
        'gpus[0].mig.current: "true" is not true or false',
    ),
    "instances with MIG off": (
        lambda d: d["gpus"][1].update(gpu_instances=copy.deepcopy(d["gpus"][0]["gpu_instances"])),
        "gpus[1].gpu_instances: 1 GPU instances while MIG is off",
    ),
    "instance start is a float": (
        lambda d: d["gpus"][0]["gpu_instances"][0].update(start=4.0),
        "gpus[0].gpu_instances[0].start: 4.0 is not an integer",
    ),
    "instance size 0": (
        lambda d: d["gpus"][0]["gpu_instances"][0].update(size=0),
        "gpus[0].gpu_instances[0].size: 0 is not in >= 1",
    ),
    "compute instance not an object": (
        lambda d: d["gpus"][0]["gpu_instances"][0].update(compute_instances=[3]),
        "gpus[0].gpu_instances[0].compute_instances[0]: an integer, not a JSON object",
    ),
    "unknown GPU key": (lambda d: d["gpus"][0].update(serial="x"), 'gpus[0]: unknown key "serial"'),
    "name longer than NVML's": (
        lambda d: d["gpus"][0].update(name="A" * 97),
        "gpus[0].name: 97 characters, more than NVML's 96",
    ),
    "gpus is an object": (lambda d: d.update(gpus={}), "gpus: a mapping, not a list"),
    "gpus without NVML": (
        lambda d: d.update(nvml="driver-not-loaded"),
        'gpus: 2 GPUs although nvml is "driver-not-loaded"',
    ),
    "unknown nvml state": (lambda d: d.update(nvml="fine"), 'nvml: "fine" is not one of'),
    "driver version is a number": (
        lambda d: d.update(driver_version=550),
        "driver_version: 550 is not a string",
    ),
    "files is a list": (
        lambda d: d.update(files=["/etc/x.yaml"]),
        "files: a list, not a JSON object",
    ),
    "a file is a number": (
        lambda d: d["files"].update({"/etc/x.yaml": 1}),
        'files["/etc/x.yaml"]: an integer, not a file\'s text, null or an error',
    ),
    "a file error is not a string": (
        lambda d: d["files"].update({"/etc/x.yaml": {"error": 5}}),
        'files["/etc/x.yaml"]: a mapping, not a file\'s text',
    ),
    "containerd is a list": (lambda d: d.update(containerd=[]), "containerd: a list, not"),
    "too many GPUs": (lambda d: d.update(gpus=[{}] * 1025), "gpus: 1025 entries, more than 1024"),
    "packages is a list": (lambda d: d.update(packages=[]), "packages: a list, not a JSON object"),
    "a held that is a string": (
        lambda d: d["packages"]["nvidia-driver"].update(held="yes"),
        'packages["nvidia-driver"].held: "yes" is not true or false',
    ),
    "a version that is a number": (
        lambda d: d["packages"]["nvidia-driver"].update(version=535),
        'packages["nvidia-driver"].version: 535 is not a string of at most 64 characters or null',
    ),
    "a version of a megabyte": (
        lambda d: d["packages"]["nvidia-driver"].update(version="1" * 2**20),
        'packages["nvidia-driver"].version: "111',
    ),
    "a package without its hold": (
        lambda d: d["packages"]["nvidia-driver"].pop("held"),
        'packages["nvidia-driver"]: missing held',
    ),
    "an empty package name": (
        lambda d: d["packages"].update({"": {"version": None, "held": False}}),
        'packages[""]: not a name',
    ),
    "too many packages": (
        lambda d: d.update(
            packages={f"p{n}": {"version": None, "held": False} for n in range(4097)}
        ),
        "packages: 4097 entries, more than 4096",
    ),
    "a unit state that is a list": (
        lambda d: d["units"]["gpuprov-mig.service"].update(enabled=["enabled"]),
        'units["gpuprov-mig.service"].enabled: a list is not a string',
    ),
    "a unit with an unknown key": (
        lambda d: d["units"]["gpuprov-mig.service"].update(since="boot"),
        'units["gpuprov-mig.service"]: unknown key "since"',
    ),
    "units is a string": (lambda d: d.update(units="all"), "units: a string, not a JSON object"),
    "pod_resources without its socket": (
        lambda d: d["pod_resources"].pop("socket"),
        "pod_resources: missing socket",
    ),
    "a pod-resources row without its pod": (
        lambda d: d["pod_resources"]["containers"][0].pop("pod"),
        "pod_resources.containers[0]: missing pod",
    ),
    "a device id that is a number": (
        lambda d: d["pod_resources"]["containers"][0].update(device_ids=[7]),
        "pod_resources.containers[0].device_ids[0]: 7 is not a non-empty string",
    ),
    "device ids that are a string": (
        lambda d: d["pod_resources"]["containers"][0].update(device_ids="GPU-0"),
        "pod_resources.containers[0].device_ids: a string, not a list",
    ),
    "unlisted pods that are a string": (
        lambda d: d["pod_resources"].update(unlisted="ns/p"),
        "pod_resources.unlisted: a string, not a list",
    ),
    "an unlisted pod that is a number": (
        lambda d: d["pod_resources"].update(unlisted=["ns/p", 7]),
        "pod_resources.unlisted[1]: 7 is not a non-empty string",
    ),
    "an unknown key beside unlisted": (
        lambda d: d["pod_resources"].update(unlisted=[], missing=[]),
        'pod_resources: unknown key "missing"',
    ),
    "pod-resources rows that are an object": (
        lambda d: d["pod_resources"].update(containers={"p": 1}),
        "pod_resources.containers: a mapping, not a list",
    ),
}


@pytest.mark.parametrize("change,problem", list(CASES.values()), ids=list(CASES))
def test_each_break_of_the_schema_is_named(change, problem):
    problems = edited(change)
    assert any(p.startswith(problem) for p in problems), problems


def test_a_section_the_probe_could_not_read_is_its_error_not_a_schema_problem():
    document = good()
    document["packages"] = {"error": "no dpkg-query on this host"}
    document["units"] = {"error": "no systemctl on this host"}
    document["pod_resources"]["containers"] = {"error": "answered gRPC status 7: denied"}
    assert schema_problems(document) == []
    document["pod_resources"]["containers"] = None  # no kubelet socket
    assert schema_problems(document) == []


def test_a_malformed_document_is_findings_and_never_a_document():
    document = good()
    for entry in document["gpus"]:
        entry["index"] = "x"
        entry["uuid"] = 7
        entry["name"] = None
    checked, findings = read("h", document, "/agent.pyz", "python3")
    assert checked is None
    assert len(findings) == MAX_SHOWN_PROBLEMS + 1
    assert findings[-1].found == "... and 1 more problems"
    assert {f.check for f in findings} == {"probe-document"}


@pytest.mark.parametrize("document", [None, [], "text", 3, {}, {"schema": "gpuprov.probe/v0"}])
def test_no_probe_document_at_all_is_a_finding(document):
    checked, [finding] = read("h", document, "/agent.pyz", "python3")
    assert checked is None and finding.check in ("agent", "probe-document")


def test_a_probe_without_the_files_the_checks_need_is_a_finding():
    document = good()
    wanted = Wanted(files=("/etc/x.yaml", "/etc/y.toml"))
    checked, _ = read("h", document, "/agent.pyz", "python3")
    [finding] = missing_files("h", checked, wanted, "python3 agent.pyz probe ...")
    assert finding.found == "not read: /etc/y.toml"
    del document["files"]
    checked, _ = read("h", document, "/agent.pyz", "python3")
    [finding] = missing_files("h", checked, wanted, "python3 agent.pyz probe ...")
    assert finding.found == "no files section" and "python3 agent.pyz probe" in finding.hint
    assert missing_files("h", checked, Wanted(), "") == []


@pytest.mark.parametrize("unlisted", [[], ["ml/train"], None, {"error": "no answer"}])
def test_each_form_of_the_unlisted_pods_passes(unlisted):
    assert edited(lambda d: d["pod_resources"].update(unlisted=unlisted)) == []
