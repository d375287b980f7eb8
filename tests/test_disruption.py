"""What a change takes from running pods: the touched GPUs and devices from the plan's MIG diff
and a driver change, the device plugin's ids mapped to GPUs, the pods holding them, and the
disruption budgets named when an eviction is refused."""

from __future__ import annotations

from gpuprov.core.catalog import find_model
from gpuprov.core.cluster.budgets import holding, matches
from gpuprov.core.disruption import device_gpus, gpu_of, holders, taken, touched
from gpuprov.host.mig.diff import diff

H100 = find_model("H100-80GB")


def _instance(name: str, start: int) -> dict:
    p = H100.profile(name)
    size = next(z for s, z in p.placements if s == start)
    return {"profile": name, "profile_id": p.id, "start": start, "size": size}


def _gi(gi_id: int, name: str, start: int, uuid: str) -> dict:
    p = H100.profile(name)
    return {
        "id": gi_id,
        **_instance(name, start),
        "compute_instances": [
            {"id": 0, "profile_id": 0, "slice_count": p.compute_slices, "uuid": uuid}
        ],
    }


def _mig_gpu(index: int, *gis: dict) -> dict:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "mig": {"current": True, "pending": True},
        "gpu_instances": list(gis),
    }


# GPU 0: 3g@4 + 2g@0 + 1g@2 + 1g@3; GPU 5: one 7g; GPU 6: a whole card.
PROBE = {
    "gpus": [
        _mig_gpu(
            0,
            _gi(2, "3g.40gb", 4, "MIG-0-3g"),
            _gi(3, "2g.20gb", 0, "MIG-0-2g"),
            _gi(9, "1g.10gb", 2, "MIG-0-1g-a"),
            _gi(10, "1g.10gb", 3, "MIG-0-1g-b"),
        ),
        _mig_gpu(5, _gi(0, "7g.80gb", 0, "MIG-5-7g")),
        {"index": 6, "uuid": "GPU-6", "mig": {"current": False, "pending": False}},
    ]
}
DEFAULT = [_instance("3g.40gb", 4), _instance("2g.20gb", 0)]
DEFAULT += [_instance("1g.10gb", 2), _instance("1g.10gb", 3)]


def _actions(layouts: dict[int, tuple[bool, list[dict]]]):
    observed = {g["index"]: g for g in PROBE["gpus"]}
    out = []
    for index, (mig, instances) in layouts.items():
        actions = diff({"mig_enabled": mig, "instances": instances}, observed[index])
        if actions.changes:
            out.append(actions)
    return out


def test_a_new_layout_on_gpu_5_touches_only_gpu_5s_destroyed_instance():
    actions = _actions({0: (True, DEFAULT), 5: (True, DEFAULT), 6: (False, [])})
    result = touched(PROBE, actions, driver_change=False)
    assert [(t.index, set(t.devices)) for t in result] == [(5, {"MIG-5-7g"})]
    assert "7g.80gb at 0" in result[0].reason


def test_instances_kept_on_a_changed_gpu_are_not_touched():
    # GPU 0 keeps 3g@4 and 2g@0, gives up both 1g for a 1g.20gb at 2: only those two go.
    layout = [_instance("3g.40gb", 4), _instance("2g.20gb", 0), _instance("1g.20gb", 2)]
    result = touched(PROBE, _actions({0: (True, layout)}), driver_change=False)
    assert [(t.index, set(t.devices)) for t in result] == [(0, {"MIG-0-1g-a", "MIG-0-1g-b"})]


def test_instances_only_created_touch_nothing():
    planned = [_instance("7g.80gb", 0)]
    empty = {"gpus": [_mig_gpu(5)]}
    actions = [diff({"mig_enabled": True, "instances": planned}, empty["gpus"][0])]
    assert actions[0].create and not actions[0].destroy
    assert touched(empty, actions, driver_change=False) == []


def test_a_mig_mode_change_touches_the_whole_gpu():
    result = touched(PROBE, _actions({6: (True, DEFAULT)}), driver_change=False)
    assert [(t.index, t.reason, set(t.devices)) for t in result] == [
        (6, "MIG mode change", {"GPU-6"})
    ]
    off = touched(PROBE, _actions({5: (False, [])}), driver_change=False)
    assert [(t.index, set(t.devices)) for t in off] == [(5, {"GPU-5", "MIG-5-7g"})]


def test_a_reset_outstanding_from_an_earlier_mode_change_touches_the_whole_gpu():
    # MIG was set on GPU 7 earlier (pending) but the GPU was never reset: no mode to set now,
    # the reset alone, and the reset takes the whole card from whoever holds it.
    waiting = {"index": 7, "uuid": "GPU-7", "mig": {"current": False, "pending": True}}
    actions = [diff({"mig_enabled": True, "instances": DEFAULT}, waiting)]
    assert actions[0].mig_mode is None and actions[0].reset
    result = touched({"gpus": [waiting]}, actions, driver_change=False)
    assert [(t.index, t.reason, set(t.devices)) for t in result] == [(7, "GPU reset", {"GPU-7"})]


def test_a_driver_change_touches_every_gpu_and_every_device():
    result = touched(PROBE, [], driver_change=True)
    assert [t.index for t in result] == [0, 5, 6]
    assert set().union(*(t.devices for t in result)) == set(device_gpus(PROBE))


def test_no_mig_action_and_no_driver_change_touch_nothing():
    # What a replica change or a config-only change leaves: no MIG action at all.
    assert touched(PROBE, [], driver_change=False) == []


def test_every_id_format_of_the_device_plugin_maps_to_its_gpu():
    by_uuid = device_gpus(PROBE)
    assert gpu_of("GPU-6", by_uuid) == 6  # a whole card
    assert gpu_of("MIG-0-2g", by_uuid) == 0  # a MIG device
    assert gpu_of("GPU-6::3", by_uuid) == 6  # a time-sliced replica of a card
    assert gpu_of("MIG-5-7g::1", by_uuid) == 5  # a time-sliced MIG device
    assert gpu_of("GPU-elsewhere", by_uuid) is None


def test_only_the_pods_holding_a_touched_device_are_holders():
    rows = [
        {"namespace": "ml", "pod": "on-5", "container": "c", "device_ids": ["MIG-5-7g"]},
        {"namespace": "ml", "pod": "on-0", "container": "c", "device_ids": ["MIG-0-3g"]},
        {"namespace": "ml", "pod": "shares", "container": "a", "device_ids": ["GPU-6::0"]},
        {"namespace": "ml", "pod": "shares", "container": "b", "device_ids": ["GPU-6::2"]},
        {"namespace": "ml", "pod": "nic", "container": "c", "device_ids": ["0000:3b:00.0"]},
    ]
    by_uuid = device_gpus(PROBE)
    layout = touched(PROBE, _actions({5: (True, DEFAULT)}), driver_change=False)
    assert [(h.name, h.gpus) for h in holders(rows, taken(layout), by_uuid)] == [("ml/on-5", (5,))]
    driver = touched(PROBE, [], driver_change=True)
    found = {h.name: h for h in holders(rows, taken(driver), by_uuid)}
    assert sorted(found) == ["ml/on-0", "ml/on-5", "ml/shares"]
    assert found["ml/shares"].devices == ("GPU-6::0", "GPU-6::2")  # one pod, both containers


def _pdb(name: str, namespace: str, selector: dict | None) -> dict:
    spec = {} if selector is None else {"selector": selector}
    status = {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}


def test_the_budgets_of_the_pods_namespace_whose_selector_matches_are_named():
    pod = {"metadata": {"name": "p", "namespace": "ml", "labels": {"app": "train", "t": "a"}}}
    budgets = [
        _pdb("match", "ml", {"matchLabels": {"app": "train"}}),
        _pdb("everything", "ml", {}),
        _pdb("no-selector", "ml", None),
        _pdb("other-namespace", "web", {"matchLabels": {"app": "train"}}),
        _pdb("other-app", "ml", {"matchLabels": {"app": "serve"}}),
    ]
    names = [line.split()[1] for line in holding(pod, budgets)]
    assert names == ["ml/match", "ml/everything"]
    assert "0 disruptions allowed, 1 healthy of 1 desired" in holding(pod, budgets)[0]


def test_label_selector_expressions():
    labels = {"app": "train", "tier": "gpu"}
    assert matches(
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["train"]}]}, labels
    )
    assert not matches(
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, labels
    )
    assert not matches(
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels
    )
    assert matches(
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, labels
    )
    assert matches({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, labels)
    assert not matches({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    assert not matches({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, labels)
    both = {
        "matchLabels": {"app": "train"},
        "matchExpressions": [{"key": "zone", "operator": "Exists"}],
    }
    assert not matches(both, labels)
