"""The typed plan's areas and the variable registry name the same keys, each once: a key added to
one and not the other fails here, not on a host."""

from __future__ import annotations

import dataclasses
from collections import Counter

from gpuprov.controller.inventory import load
from gpuprov.core.plan import HostPlan, build
from gpuprov.core.plan_areas import AREAS, MODE_AREAS, Sharing, keyed, registry_key
from gpuprov.core.variables import VARIABLES
from gpuprov.core.vgpu import Vgpu

# Keys HostPlan holds itself, outside any area.
_HOST_KEYS = ("gpu_model", "gpu_count")
_ALL_AREAS = {**AREAS, **MODE_AREAS, "vgpu": Vgpu}


def _area_keys() -> Counter[str]:
    keys: Counter[str] = Counter(_HOST_KEYS)
    for cls in _ALL_AREAS.values():
        keys.update(registry_key(f) for f in keyed(cls))
    return keys


def test_every_registry_key_is_a_field_of_exactly_one_area():
    keys = _area_keys()
    assert [k for k in VARIABLES if keys[k] != 1] == []


def test_every_area_field_is_a_registry_key():
    assert [k for k in _area_keys() if k not in VARIABLES] == []


def test_every_area_is_a_field_of_the_host_plan_and_frozen():
    fields = {f.name for f in dataclasses.fields(HostPlan)}
    assert set(_ALL_AREAS) <= fields
    for cls in _ALL_AREAS.values():
        assert cls.__dataclass_params__.frozen, cls.__name__


def test_the_plan_has_no_settings_dict():
    assert "settings" not in {f.name for f in dataclasses.fields(HostPlan)}


def test_sharing_takes_the_device_plugins_names():
    # k8s-device-plugin api/config/v1/sharing.go: `sharing` with `timeSlicing` or `mps`.
    plan = build(load("inventories/example.py"))
    shared = [h.sharing for h in plan.hosts if h.mode == "shared"]
    assert shared and all(isinstance(s, Sharing) for s in shared)
    assert {s.section for s in shared} <= {"timeSlicing", "mps"}
    assert all(h.sharing is None for h in plan.hosts if h.mode != "shared")


def test_auto_max_pods_is_a_number_in_the_plan():
    plan = build(load("inventories/example.py"))
    for host in plan.hosts:
        assert isinstance(host.kubelet.kubelet_max_pods, int)
        assert host.as_dict()["settings"]["kubelet_max_pods"] == host.kubelet.kubelet_max_pods
