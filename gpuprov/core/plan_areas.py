"""A host plan's settings, one frozen dataclass per area, built from the variable registry.

Each area groups the inventory keys of one part of the host (``docs/variables.md`` lists them in
the same groups). A field is named after its inventory key, so a grep for a key finds every
reader; a field named otherwise (the sharing types take the device plugin's names) says its key
in ``metadata["key"]``, and a field the planner works out (not a key) says ``derived``. Every
value is checked by the registry and resolved once, at plan time: ``gpuprov_kubelet_max_pods:
auto`` is a number here. A key a host's mode may not set is None in its area.

Adding a key: its ``Variable`` in ``gpuprov/core/variables.py`` and a field of the same name in
its area below; the planner, the plan document and its reader follow from the two
(``tests/test_plan_areas.py`` fails on a key with no field or a field with no key).

>>> area(Agent, {"gpuprov_agent_path": "/usr/lib/gpuprov/agent.pyz", "gpuprov_python": "python3"})
Agent(gpuprov_agent_path='/usr/lib/gpuprov/agent.pyz', gpuprov_python='python3')
>>> registry_key(fields(Sharing)[1])
'time_slicing_replicas'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from gpuprov.core.memory_budget import ShareMemory
from gpuprov.host.contract import SHARING_MPS, SHARING_TIME_SLICING

T = TypeVar("T")


def _key(name: str) -> Any:
    """A field whose inventory key has another name."""
    return field(metadata={"key": name})


@dataclass(frozen=True)
class Driver:
    """The NVIDIA driver: its pinned version and where its packages come from."""

    driver_version: str | None
    driver_source: str | None
    driver_repo_url: str | None
    driver_repo_suite: str
    driver_repo_components: list[str]
    driver_repo_key: str | None
    driver_reboot: bool
    driver_fabric_manager: bool
    driver_persistenced: bool


@dataclass(frozen=True)
class ContainerRuntime:
    """The container runtime and NVIDIA's container toolkit in it."""

    container_runtime: str
    container_runtime_default: bool
    container_toolkit_version: str | None
    container_toolkit_repo_url: str | None
    container_toolkit_repo_suite: str
    container_toolkit_repo_components: list[str]
    container_toolkit_repo_key: str | None
    containerd_config_path: str


@dataclass(frozen=True)
class DevicePlugin:
    """Where NVIDIA's device plugin reads its config, and how it is told to re-read it."""

    device_plugin_config_path: str
    device_plugin_reload_command: str


@dataclass(frozen=True)
class Sharing:
    """The sharing of a ``shared`` host's GPUs, as the device plugin names it (``sharing`` with
    ``timeSlicing`` or ``mps``, k8s-device-plugin api/config/v1/sharing.go): replicas per GPU
    under ``strategy``, and the memory one replica may use. The inventory keys keep their
    names (``time_slicing_*`` set both strategies)."""

    strategy: str = _key("sharing_strategy")
    replicas: int = _key("time_slicing_replicas")
    rename: bool = _key("time_slicing_rename")
    fail_requests_greater_than_one: bool = _key("time_slicing_fail_requests_greater_than_one")
    mps_root: str = _key("mps_root")
    memory: ShareMemory | None = field(default=None, metadata={"derived": True})

    @property
    def section(self) -> str:
        """The device plugin config's key under ``sharing`` for this strategy."""
        return _SECTIONS[self.strategy]

    def as_dict(self) -> dict:
        return {
            "replicas": self.replicas,
            "rename": self.rename,
            "fail_requests_greater_than_one": self.fail_requests_greater_than_one,
            "strategy": self.strategy,
            "memory_per_share": self.memory.as_dict() if self.memory else None,
        }


# The config's key of each sharing strategy (api/config/v1/sharing.go).
_SECTIONS = {SHARING_TIME_SLICING: "timeSlicing", SHARING_MPS: "mps"}


@dataclass(frozen=True)
class Budget:
    """The memory budget of one share on a ``shared`` or ``vgpu`` host."""

    memory_per_share_gib: int | float | None
    allow_memory_overcommit: bool


@dataclass(frozen=True)
class Mig:
    """MIG: the layouts (None outside ``mig``), the strategy, and the GPU clients stopped while
    a layout changes."""

    mig_layout: dict[str, int] | None
    mig_layout_by_gpu: dict[int, dict[str, int] | None] | None
    mig_strategy: str | None
    gpu_clients: list[str]
    mig_reboot: bool


@dataclass(frozen=True)
class Kubelet:
    """The kubelet: its ``maxPods`` resolved to a number (under Kubespray's key and gpuprov's
    own, which carry the same number in a plan), and its config files."""

    kubelet_max_pods: int
    gpuprov_kubelet_max_pods: int
    kubelet_config_dir: str | None
    kubelet_config_path: str
    verify_kubelet_devices: bool


@dataclass(frozen=True)
class Agent:
    """gpuprov's own host agent."""

    gpuprov_agent_path: str
    gpuprov_python: str


@dataclass(frozen=True)
class Node:
    """The host's Kubernetes node: how to reach the API, how long a drain may take and what it
    evicts."""

    kubeconfig: str | None
    kube_node_name: str | None
    drain_timeout: int
    drain_scope: str


@dataclass(frozen=True)
class Pool:
    """The node labels and taints gpuprov owns (``{mode}`` still in them)."""

    kube_node_labels: dict[str, str]
    kube_node_taints: list[str]


@dataclass(frozen=True)
class Timeouts:
    """The time limits of remote steps, in seconds."""

    gpuprov_timeout_step: int
    gpuprov_timeout_apt_update: int
    gpuprov_timeout_packages: int
    gpuprov_timeout_service: int
    gpuprov_timeout_mig: int
    gpuprov_timeout_probe: int
    gpuprov_ssh_dead_after: int


@dataclass(frozen=True)
class Health:
    """What makes verify report a GPU unhealthy."""

    health_critical_xids: list[int]


@dataclass(frozen=True)
class Fleet:
    """The in-cluster deploy of ``kube render --fleet``: how many nodes of the host's pool its
    Plan changes at once."""

    fleet_concurrency: int


# HostPlan's field name -> the area it holds; every host has each of these. ``Sharing``,
# ``Budget`` and ``Vgpu`` (gpuprov.core.vgpu) are the areas of keys only some modes set.
@dataclass(frozen=True)
class Canary:
    """``gpuprov verify --canary``'s pods on this host's node: image, command, start limit."""

    canary_image: str
    canary_command: list[str]
    canary_timeout: int


@dataclass(frozen=True)
class Queues:
    """The teams' queues over the pools (group data of the inventory's top group): checked
    here, worked out against the cluster's capacity by ``gpuprov.core.cluster.queues``."""

    kube_queues: dict[str, Any]
    kube_queues_overcommit: dict[str, Any]
    kube_queues_volcano_plugin: str


AREAS: dict[str, type] = {
    "driver": Driver,
    "runtime": ContainerRuntime,
    "device_plugin": DevicePlugin,
    "mig": Mig,
    "kubelet": Kubelet,
    "agent": Agent,
    "node": Node,
    "pool": Pool,
    "timeouts": Timeouts,
    "health": Health,
    "queues": Queues,
    "canary": Canary,
    "fleet": Fleet,
}
MODE_AREAS: dict[str, type] = {"sharing": Sharing, "budget": Budget}


def host_areas(settings: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """HostPlan's areas (by field name) of a host in ``mode`` with checked, resolved
    ``settings``: every area of ``AREAS``, and ``budget`` on ``shared`` and ``vgpu`` hosts
    (``sharing`` and ``vgpu`` also need what the planner works out)."""
    out: dict[str, Any] = {name: area(cls, settings) for name, cls in AREAS.items()}
    out["budget"] = area(Budget, settings) if mode in BUDGET_MODES else None
    return out


# The modes whose hosts set a memory budget per share.
BUDGET_MODES = ("shared", "vgpu")


def registry_key(f: Field) -> str:
    """The inventory key a field holds."""
    return f.metadata.get("key", f.name)


def keyed(cls: type) -> tuple[Field, ...]:
    """The fields of ``cls`` that hold inventory keys (not the ones the planner derives)."""
    return tuple(f for f in fields(cls) if not f.metadata.get("derived"))


def area(cls: type[T], settings: Mapping[str, Any], **resolved: Any) -> T:
    """The area ``cls`` of checked ``settings`` (inventory key -> value; a key not set for the
    host's mode is None), with ``resolved`` values in place of the keys' own."""
    values = {f.name: settings.get(registry_key(f)) for f in keyed(cls)}
    return cls(**{**values, **resolved})


def settings_of(value: Any) -> dict[str, Any]:
    """An area's inventory keys and their values (the plan document's ``settings``)."""
    return {registry_key(f): getattr(value, f.name) for f in keyed(type(value))}
