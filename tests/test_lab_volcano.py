"""Volcano v1.15.1's webhook manager, controller manager and scheduler run outside a pod against
a real API server: Queues are checked by Volcano's own admission code (guarantee <= deserved
<= capability, children within their parent), and the scheduler and controller manager act on
them."""

from __future__ import annotations

import time

import lab_consumers
import pytest
import yaml
from gpuprov_lab import volcano
from kube_cluster import control_plane


@pytest.fixture(scope="module")
def cluster():
    lab_consumers.require_shared()
    plane = control_plane()
    handle = None
    try:
        workdir = lab_consumers.workdir("volcano")
        conf = workdir / "scheduler.conf"
        conf.write_text(yaml.safe_dump(volcano.scheduler_conf("capacity", hierarchy=True)))
        handle = volcano.start(plane.admin_kubeconfig, "127.0.0.1", workdir, conf)
        yield plane, handle
    finally:
        if handle:
            handle.stop()
        plane.stop()


def queue(name, parent=None, **spec):
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {**spec, **({"parent": parent} if parent else {})},
    }


def test_scheduler_and_controller_manager_made_and_opened_the_root_and_default_queues(cluster):
    plane, _ = cluster
    for name in ("root", "default"):
        assert lab_consumers.get(plane, "queue", name)["status"]["state"] == "Open"


def test_valid_queue_is_admitted_defaulted_by_the_webhook_and_opened(cluster):
    plane, _ = cluster
    document = queue(
        "team-b",
        capability={"nvidia.com/mig-1g.10gb": "16"},
        deserved={"nvidia.com/mig-1g.10gb": "8"},
        guarantee={"resource": {"nvidia.com/mig-1g.10gb": "4"}},
    )
    result = lab_consumers.create(plane, document)
    assert result.returncode == 0, result.stderr
    # /queues/mutate sets reclaimable (the CRD has no default for it): the webhook was called.
    assert lab_consumers.get(plane, "queue", "team-b")["spec"]["reclaimable"] is True
    deadline = time.monotonic() + 30
    while lab_consumers.get(plane, "queue", "team-b").get("status", {}).get("state") != "Open":
        assert time.monotonic() < deadline, "the queue controller did not open team-b"
        time.sleep(0.5)


def test_guarantee_above_deserved_is_refused_by_the_webhook(cluster):
    plane, _ = cluster
    document = queue(
        "over-guaranteed",
        deserved={"nvidia.com/gpu.shared": "2"},
        guarantee={"resource": {"nvidia.com/gpu.shared": "4"}},
    )
    result = lab_consumers.create(plane, document)
    assert result.returncode != 0
    assert 'admission webhook "validatequeue.volcano.sh" denied the request' in result.stderr
    assert "must be >= guarantee" in result.stderr


def test_deserved_above_capability_is_refused_by_the_webhook(cluster):
    plane, _ = cluster
    document = queue(
        "over-deserved",
        capability={"nvidia.com/gpu.shared": "8"},
        deserved={"nvidia.com/gpu.shared": "16"},
    )
    result = lab_consumers.create(plane, document)
    assert result.returncode != 0
    assert 'admission webhook "validatequeue.volcano.sh" denied the request' in result.stderr


def test_child_with_more_capability_than_its_parent_is_refused(cluster):
    plane, _ = cluster
    parent = queue("research", capability={"nvidia.com/gpu": "8"}, deserved={"nvidia.com/gpu": "8"})
    assert lab_consumers.create(plane, parent).returncode == 0
    child = queue(
        "research-nlp",
        parent="research",
        capability={"nvidia.com/gpu": "16"},
        deserved={"nvidia.com/gpu": "4"},
    )
    result = lab_consumers.create(plane, child)
    assert result.returncode != 0
    assert 'admission webhook "validatequeue.volcano.sh" denied the request' in result.stderr
    fits = queue(
        "research-cv",
        parent="research",
        capability={"nvidia.com/gpu": "8"},
        deserved={"nvidia.com/gpu": "4"},
    )
    result = lab_consumers.create(plane, fits)
    assert result.returncode == 0, result.stderr


def test_scheduler_conf_enables_one_queue_plugin_never_both():
    for plugin in volcano.QUEUE_PLUGINS:
        names = [
            p["name"] for tier in volcano.scheduler_conf(plugin)["tiers"] for p in tier["plugins"]
        ]
        assert [n for n in names if n in volcano.QUEUE_PLUGINS] == [plugin]
    # The capacity plugin borrows and gives back through the reclaim action.
    assert "reclaim" in volcano.scheduler_conf("capacity")["actions"]
    with pytest.raises(ValueError, match="capacity plugin"):
        volcano.scheduler_conf("proportion", hierarchy=True)


def test_stop_ends_the_three_processes_and_removes_the_webhooks(cluster):
    plane, handle = cluster
    assert set(handle.rss_kib()) == set(volcano.BINARIES)
    handle.stop()
    lab_consumers.assert_torn_down(handle)
    listed = plane.kubectl(
        "get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
    )
    assert "volcano-admission-service" not in listed.stdout
    # With no webhook left, a Queue that Volcano would refuse is stored: nothing else checks it.
    document = queue("unchecked", deserved={"cpu": "1"}, guarantee={"resource": {"cpu": "2"}})
    result = lab_consumers.create(plane, document)
    assert result.returncode == 0, result.stderr
