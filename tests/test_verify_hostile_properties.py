"""Property tests (hypothesis) for verify on generated malformed input: a probe document or a
managed file's text that breaks its schema is never an exception, never "ok", and is judged in
bounded time; a snapshot file of any bytes under any host name is a finding, never an OSError,
and never read from outside ``--snapshot-dir``.

Each mutation below breaks the schema by construction (a required key gone, a value of a type or
range the schema does not allow, a key it does not know, a file gpuprov writes replaced by
another shape), so "malformed" is decided by the mutation, not by a second copy of the checks.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from functools import cache
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plans import plan_for
from probes import matching_probe

from gpuprov.controller.readback import snapshot_name, verify_snapshots
from gpuprov.core.checks.host import compare, wanted_files
from gpuprov.core.hostfiles import kubelet
from gpuprov.host.contract import MIG_LAYOUT_PATH, PROBE_NVML_STATES, PROBE_SCHEMA
from tests import scratch

SECONDS = 2.0  # per document; a good one takes milliseconds

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
junk = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@cache
def plans() -> tuple:
    root = scratch.directory("hostile")
    return (
        plan_for(root, "shared", time_slicing_replicas=4),
        plan_for(root, "mig", mig_layout={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}),
        plan_for(root, "whole_card", kubelet_config_dir=None, kubelet_max_pods=200),
    )


def not_a(*types):
    """Junk that is none of ``types`` (bool is not an int here, as in JSON)."""

    def wrong(value) -> bool:
        if isinstance(value, bool):
            return bool not in types
        return not isinstance(value, types)

    return junk.filter(wrong)


# --- mutations: (document, draw, plan) -> the malformed document


def whole_document(doc, draw, plan):
    return draw(not_a(dict))


def drop_top_key(doc, draw, plan):
    del doc[draw(st.sampled_from(["schema", "nvml", "gpus", "files"]))]
    return doc


def wrong_top_value(doc, draw, plan):
    key, bad = draw(
        st.sampled_from(
            [
                ("schema", junk.filter(lambda v: v != PROBE_SCHEMA)),
                (
                    "nvml",
                    junk.filter(lambda v: not isinstance(v, str) or v not in PROBE_NVML_STATES),
                ),
                ("gpus", not_a(list)),
                ("files", not_a(dict)),
                ("error", not_a(str, type(None))),
                ("driver_version", not_a(str, type(None))),
                ("nvml_version", not_a(str, type(None))),
            ]
        )
    )
    doc[key] = draw(bad)
    return doc


def unknown_key(doc, draw, plan):
    where = draw(st.sampled_from(["top", "gpu", "gi"]))
    target = doc
    known = {"schema", "nvml", "gpus", "files", "error", "driver_version", "nvml_version"}
    if where == "gpu":
        target = draw(st.sampled_from(doc["gpus"]))
        known = set(target)
    elif where == "gi":
        gis = [gi for gpu in doc["gpus"] for gi in gpu["gpu_instances"]]
        if gis:
            target = draw(st.sampled_from(gis))
            known = set(target)
    target[draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in known))] = draw(junk)
    return doc


def drop_gpu_key(doc, draw, plan):
    gpu = draw(st.sampled_from(doc["gpus"]))
    del gpu[draw(st.sampled_from(sorted(gpu)))]
    return doc


def wrong_gpu_value(doc, draw, plan):
    n = draw(st.integers(0, len(doc["gpus"]) - 1))
    gpu = doc["gpus"][n]
    key = draw(
        st.sampled_from(
            ["index", "uuid", "pci_bus_id", "name", "memory_total_mib", "mig", "gpu_instances"]
        )
    )
    if key == "index":
        # Any other index repeats another GPU's, leaves a gap, or is not an index at all.
        gpu[key] = draw(junk.filter(lambda v: not (type(v) is int and v == n)))
    elif key in ("uuid", "pci_bus_id"):
        other = doc["gpus"][(n + 1) % len(doc["gpus"])][key]
        gpu[key] = draw(not_a(str) | st.just("") | st.just(other))
    elif key == "name":
        gpu[key] = draw(not_a(str))
    elif key == "memory_total_mib":
        gpu[key] = draw(not_a(int) | st.integers(max_value=-1))
    elif key == "mig":
        gpu[key] = draw(
            not_a(dict, type(None))
            | st.fixed_dictionaries({"current": not_a(bool), "pending": st.booleans()})
            | st.fixed_dictionaries({"current": st.booleans()})
        )
    else:
        gpu[key] = draw(not_a(list))
    return doc


def wrong_gi_value(doc, draw, plan):
    gis = [gi for gpu in doc["gpus"] for gi in gpu["gpu_instances"]]
    if not gis:  # MIG off everywhere: instances where MIG is off are themselves malformed
        doc["gpus"][0]["gpu_instances"] = [{"id": 1}]
        return doc
    gi = draw(st.sampled_from(gis))
    key = draw(st.sampled_from(["id", "profile_id", "start", "size", "compute_instances", "ci"]))
    if key == "ci":
        ci = gi["compute_instances"][0]
        ci[draw(st.sampled_from(sorted(ci)))] = draw(not_a(int) | st.integers(max_value=-1))
    elif key == "compute_instances":
        gi[key] = draw(not_a(list) | st.lists(not_a(dict), min_size=1, max_size=3))
    else:
        gi[key] = draw(not_a(int) | st.integers(max_value=-1))
    return doc


def wrong_file_entry(doc, draw, plan):
    if draw(st.booleans()):
        # A file the plan needs was not read (a glob's match may be absent: nothing matched).
        path = draw(st.sampled_from(sorted(set(doc["files"]) & set(wanted_files(plan).files))))
        del doc["files"][path]
        return doc
    path = draw(st.sampled_from(sorted(doc["files"])))
    # {"error": why} is the probe's own marker for a file it would not read: not malformed.
    doc["files"][path] = draw(not_a(str, type(None)).filter(lambda v: not _unread(v)))
    return doc


def _unread(value) -> bool:
    return isinstance(value, dict) and set(value) == {"error"} and isinstance(value["error"], str)


def ours(plan) -> list[str]:
    """The files gpuprov writes on this host (their content is all gpuprov's)."""
    paths = [kubelet.target(plan), plan.runtime.containerd_config_path]
    if plan.mode != "whole_card":
        paths.append(plan.device_plugin.device_plugin_config_path)
    if plan.mode == "mig":
        paths.append(MIG_LAYOUT_PATH)
    return paths


def wrong_file_text(doc, draw, plan):
    path = draw(st.sampled_from(ours(plan)))
    text = draw(
        st.text(max_size=200)
        | junk.map(json.dumps)  # JSON is YAML too: any shape, in a file that must be a mapping
        | st.sampled_from(["version = [2]\n", "version = 2\nimports = 5\n", "a: &a [*a]\n"])
    )
    if text == doc["files"].get(path):
        text += "\nx"
    doc["files"][path] = text
    return doc


def wrong_node_in_a_written_file(doc, draw, plan):
    """One node of a YAML or JSON file gpuprov writes replaced by a value of another type."""
    # TOML has no writer here; mig-layout.json is checked node by node once its own module
    # (gpuprov.core.hostfiles.mig_layout, issue #9) validates the whole file.
    candidates = [p for p in ours(plan) if not p.endswith((".toml", ".json"))]
    path = draw(st.sampled_from(candidates))
    parsed = yaml.safe_load(doc["files"][path])
    nodes = list(_nodes(parsed))
    if not plan.kubelet.kubelet_config_dir and path == kubelet.target(plan):
        nodes = [(at, v) for at, v in nodes if at == ("maxPods",)]  # the rest is the site's
    at, original = draw(st.sampled_from(nodes))
    # null is "unset", which api/config/v1 reads as the default (v1, none, false): no change.
    replacement = draw(junk.filter(lambda v: v is not None and type(v) is not type(original)))
    parsed = _replace(parsed, at, replacement)
    doc["files"][path] = json.dumps(parsed)  # JSON is YAML too
    return doc


MUTATIONS = [
    whole_document,
    drop_top_key,
    wrong_top_value,
    unknown_key,
    drop_gpu_key,
    wrong_gpu_value,
    wrong_gi_value,
    wrong_file_entry,
    wrong_file_text,
    wrong_node_in_a_written_file,
]


def _nodes(value, at=()):
    yield at, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _nodes(child, (*at, key))
    elif isinstance(value, list):
        for n, child in enumerate(value):
            yield from _nodes(child, (*at, n))


def _replace(value, at, replacement):
    if not at:
        return replacement
    value[at[0]] = _replace(value[at[0]], at[1:], replacement)
    return value


# Checks this branch owns must handle every shape themselves, not through the guard.
OWN_CHECKS = ("GPU", "device plugin config", "kubelet config")


@settings(
    max_examples=400,
    deadline=None,  # timed below, per call, against SECONDS
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_a_malformed_probe_document_is_never_ok_never_an_exception_and_quick(data):
    plan = data.draw(st.sampled_from(plans()), label="plan")
    mutation = data.draw(st.sampled_from(MUTATIONS), label="mutation")
    document = mutation(matching_probe(plan), data.draw, plan)
    # What a host or a snapshot hands verify is JSON text.
    document = json.loads(json.dumps(document))
    started = time.monotonic()
    findings = compare(plan, document)
    assert time.monotonic() - started < SECONDS
    assert findings, "a malformed document reported ok"
    crashed = [f for f in findings if f.check == "check-failed"]
    assert not [f for f in crashed if any(name in f.expected for name in OWN_CHECKS)], crashed


def test_the_unmutated_documents_are_ok():
    for plan in plans():
        assert compare(plan, matching_probe(plan)) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.text(max_size=300), content=st.binary(max_size=300))
def test_any_host_name_and_any_snapshot_bytes_are_a_finding_inside_the_dir(name, content):
    plan = dataclasses.replace(plans()[0], name=name)
    with tempfile.TemporaryDirectory() as directory:
        file_name = snapshot_name(name)
        if file_name is not None:
            assert (Path(directory) / file_name).resolve().parent == Path(directory).resolve()
            (Path(directory) / file_name).write_bytes(content)
        [(host, findings)] = verify_snapshots(directory, [plan]).items()
    assert host == name and findings
