"""Pods the container runtime runs that the kubelet does not list (its view of the node is not
whole, right after a restart): one finding naming them, from the probe's ``unlisted``."""

from __future__ import annotations

import pytest
from plans import plan_for
from probes import matching_probe

from gpuprov.core.checks import host, kubelet_pods
from gpuprov.core.checks.probe_document import read
from gpuprov.host.contract import POD_RESOURCES_SOCKET


@pytest.fixture
def plan(tmp_path):
    return plan_for(tmp_path, "shared", time_slicing_replicas=2)


def document(plan, unlisted):
    probe = matching_probe(plan)
    probe["pod_resources"] = {"socket": POD_RESOURCES_SOCKET, "containers": []}
    if unlisted != "absent":
        probe["pod_resources"]["unlisted"] = unlisted
    return probe


def checked(plan, unlisted):
    probe, findings = read(
        plan.name, document(plan, unlisted), "/usr/lib/gpuprov/agent.pyz", "python3"
    )
    assert findings == []
    return probe


def test_pods_the_kubelet_does_not_list_are_named_with_the_rest_counted(plan):
    pods = [f"ml/train-{n}" for n in range(10)]
    (finding,) = kubelet_pods.check(plan, checked(plan, pods))
    assert finding.check == "kubelet-pods-unlisted"
    assert finding.host == plan.name and finding.gpu is None
    assert finding.found.startswith("10 pods unlisted after 30 s: ml/train-0, ml/train-1")
    assert "ml/train-7, and 2 more" in finding.found
    assert "ml/train-8" not in finding.found


@pytest.mark.parametrize("unlisted", [[], None, {"error": "no answer"}, "absent"])
def test_a_whole_list_or_none_to_compare_with_is_no_finding(plan, unlisted):
    assert kubelet_pods.check(plan, checked(plan, unlisted)) == []


def test_verify_reports_it_beside_the_other_checks(plan):
    findings = host.compare(plan, document(plan, ["ml/train-0"]))
    assert [f.check for f in findings if f.check == "kubelet-pods-unlisted"] == [
        "kubelet-pods-unlisted"
    ]
