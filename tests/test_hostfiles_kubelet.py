"""The kubelet's maxPods, both ways gpuprov sets it (a drop-in, or the main config in place): what
the deploy writes passes verify's check, and one changed field is exactly one finding."""

from __future__ import annotations

import pytest
from plans import plan_for

from gpuprov.core.hostfiles import kubelet

MAIN = "/var/lib/kubelet/config.yaml"
DROP_INS = "/etc/kubernetes/kubelet.conf.d"
OTHER_MAIN = "/opt/k8s/kubelet/config.yaml"
OTHER_DROP_INS = "/opt/k8s/kubelet/conf.d"
# A kubeadm-style main config (as `kubeadm join` writes it), maxPods 110.
KUBEADM = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
maxPods: 110
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
"""

VARIANTS = {
    "drop-in": {"kubelet_config_dir": DROP_INS},
    "drop-in-other-paths": {
        "kubelet_config_dir": OTHER_DROP_INS,
        "kubelet_config_path": OTHER_MAIN,
        "kubelet_max_pods": 250,
    },
    "in-place": {"kubelet_config_dir": None},
    "in-place-other-path": {"kubelet_config_dir": None, "kubelet_config_path": OTHER_MAIN},
}


def plan_of(tmp_path, variant: str, mode: str = "shared"):
    data = {"time_slicing_replicas": 4} if mode == "shared" else {}
    return plan_for(tmp_path, mode, **data, **VARIANTS[variant])


def written(plan, main: str | None = KUBEADM) -> dict:
    """The host's kubelet files as the deploy leaves them, starting from ``main``."""
    path = plan.kubelet.kubelet_config_path
    out = {path: main}
    out[kubelet.target(plan)] = kubelet.render(plan, main)
    return out


@pytest.mark.parametrize("mode", ["shared", "whole_card"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_what_the_deploy_writes_passes_the_check(tmp_path, variant, mode):
    plan = plan_of(tmp_path, variant, mode)
    assert kubelet.check(plan, written(plan)) == []


@pytest.mark.parametrize("variant", ["drop-in", "drop-in-other-paths"])
def test_a_drop_in_works_without_any_main_config(tmp_path, variant):
    plan = plan_of(tmp_path, variant)
    assert kubelet.check(plan, written(plan, main=None)) == []


def test_the_probe_reads_the_main_config_and_every_drop_in(tmp_path):
    plan = plan_of(tmp_path, "drop-in-other-paths")
    wanted = kubelet.paths(plan)
    assert (wanted.files, wanted.globs) == ((OTHER_MAIN,), (f"{OTHER_DROP_INS}/*.conf",))
    assert kubelet.target(plan) == f"{OTHER_DROP_INS}/50-gpuprov.conf"
    in_place = plan_of(tmp_path, "in-place-other-path")
    assert kubelet.paths(in_place).globs == () and kubelet.target(in_place) == OTHER_MAIN


def test_in_place_edit_keeps_every_other_line(tmp_path):
    plan = plan_of(tmp_path, "in-place")
    text = kubelet.render(plan, KUBEADM)
    assert text == KUBEADM.replace("maxPods: 110", f"maxPods: {plan.kubelet.kubelet_max_pods}")
    assert kubelet.render(plan, "- not a mapping\n") is None


DROP_IN_EDITS = [
    ("maxPods: 118", "maxPods: 115", "kubelet-max-pods", "maxPods 118", "maxPods 115 ({path})"),
    ("maxPods: 118", 'maxPods: "118"', "kubelet-max-pods", "maxPods 118", 'maxPods "118" ({path})'),
    (
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "apiVersion: kubelet.config.k8s.io/v1",
        "kubelet-drop-in",
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        'apiVersion: "kubelet.config.k8s.io/v1"',
    ),
    (
        "kind: KubeletConfiguration",
        "kind: KubeletConfig",
        "kubelet-drop-in",
        "kind: KubeletConfiguration",
        'kind: "KubeletConfig"',
    ),
    ("kind: KubeletConfiguration\n", "", "kubelet-drop-in", "kind: KubeletConfiguration", "unset"),
]


@pytest.mark.parametrize("old,new,check,expected,found", DROP_IN_EDITS)
def test_one_changed_field_of_the_drop_in_is_exactly_one_finding(
    tmp_path, old, new, check, expected, found
):
    plan = plan_of(tmp_path, "drop-in")  # 110 + 2 GPUs x 4 replicas
    files = written(plan)
    path = kubelet.target(plan)
    assert old in files[path]
    files[path] = files[path].replace(old, new)
    [finding] = kubelet.check(plan, files)
    assert (finding.check, finding.expected, finding.found) == (
        check,
        expected,
        found.format(path=path),
    )


def test_one_changed_max_pods_in_place_is_exactly_one_finding(tmp_path):
    plan = plan_of(tmp_path, "in-place-other-path")
    files = written(plan)
    files[OTHER_MAIN] = files[OTHER_MAIN].replace("maxPods: 118", "maxPods: 110")
    [finding] = kubelet.check(plan, files)
    assert (finding.expected, finding.found) == ("maxPods 118", f"maxPods 110 ({OTHER_MAIN})")


def test_a_site_drop_in_sorting_after_ours_wins_and_is_named(tmp_path):
    plan = plan_of(tmp_path, "drop-in")
    files = written(plan)
    files[f"{DROP_INS}/60-site.conf"] = "maxPods: 250\n"
    files[f"{DROP_INS}/40-early.conf"] = "maxPods: 300\n"
    files[f"{DROP_INS}/60-site.conf.disabled"] = "maxPods: 7\n"  # not a .conf: not read
    [finding] = kubelet.check(plan, files)
    assert finding.found == f"maxPods 250 ({DROP_INS}/60-site.conf)"
    assert "60-site.conf comes after 50-gpuprov.conf" in finding.hint


def test_without_any_max_pods_the_kubelet_runs_with_its_default(tmp_path):
    plan = plan_of(tmp_path, "in-place")
    [finding] = kubelet.check(plan, {MAIN: None})
    assert finding.found == "maxPods 110 (kubelet default)"


MALFORMED = {
    "not YAML": "maxPods: [1\n",
    "a list": "- maxPods: 118\n",
    "a string": "maxPods 118\n",
}


@pytest.mark.parametrize("text", list(MALFORMED.values()), ids=list(MALFORMED))
@pytest.mark.parametrize("which", ["ours", "site drop-in", "main"])
def test_a_kubelet_file_the_kubelet_cannot_read_is_a_finding(tmp_path, text, which):
    plan = plan_of(tmp_path, "drop-in")
    files = written(plan)
    path = {
        "ours": kubelet.target(plan),
        "site drop-in": f"{DROP_INS}/70-site.conf",
        "main": MAIN,
    }[which]
    files[path] = text
    findings = kubelet.check(plan, files)
    assert any(path in f.expected for f in findings), findings


def test_a_missing_drop_in_is_a_finding_even_when_max_pods_matches_by_default(tmp_path):
    plan = plan_for(tmp_path, "whole_card", kubelet_config_dir=DROP_INS)  # maxPods 110
    [finding] = kubelet.check(plan, {MAIN: None})
    assert (finding.check, finding.found) == ("kubelet-drop-in", "missing")
