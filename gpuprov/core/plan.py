"""Inventory + group data -> a validated per-host, per-GPU plan.

The plan is what every later step reads: the deploy applies it, verify compares hosts with it.
An impossible plan is refused here, with every problem named, before any host is touched.

Pure: it reads an InventoryData (plain hosts, groups and data; ``gpuprov/controller/inventory.py`` loads
one from a pyinfra inventory) and imports nothing of pyinfra.

>>> plan = build(load("inventories/example.py"))           # doctest: +SKIP
>>> plan.host("gpu-h100-01").gpus[0].instances[0]         # doctest: +SKIP
Instance(start=0, size=4, profile='4g.40gb', profile_id=5)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuprov.core import catalog
from gpuprov.core.errors import InputError, Problem, merged, shown
from gpuprov.core.inventory_data import InventoryData, InventoryHost
from gpuprov.core.memory_budget import (
    ShareMemory,
    mps_budget_note,
    overcommitted,
    share_memory,
    vgpu_share_memory,
)
from gpuprov.core.mig.solver import solve
from gpuprov.core.plan_areas import (
    AREAS,
    MODE_AREAS,
    Agent,
    Budget,
    Canary,
    ContainerRuntime,
    DevicePlugin,
    Driver,
    Fleet,
    Health,
    Kubelet,
    Mig,
    Node,
    Pool,
    Queues,
    Sharing,
    Timeouts,
    area,
    host_areas,
    settings_of,
)
from gpuprov.core.variables import (
    NOT_SET,
    OWN_PREFIX,
    PYINFRA_PREFIXES,
    VARIABLES,
    pool_problems,
    suggest,
)
from gpuprov.core.vgpu import Vgpu
from gpuprov.host.contract import (
    GPU_RESOURCE,
    HAMI_MEMORY_RESOURCE,
    KUBELET_DEFAULT_MAX_PODS,
    MIG_RESOURCE_PREFIX,
    MODES,
    PLAN_SCHEMA,
    SHARING_MPS,
    VOLCANO_MEMORY_RESOURCE,
)
from gpuprov.host.mig.instance import Instance


@dataclass(frozen=True)
class GpuPlan:
    """What one GPU should look like: MIG on or off, its exact instances, its replicas."""

    index: int
    model: str
    mig_enabled: bool
    layout: dict[str, int]
    instances: tuple[Instance, ...]
    replicas: int  # pods that may share it: 1 unless time-sliced or split into vGPUs

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "model": self.model,
            "mig_enabled": self.mig_enabled,
            "layout": self.layout,
            "instances": [i.as_dict() for i in self.instances],
            "replicas": self.replicas,
        }


@dataclass(frozen=True)
class HostPlan:
    """One host's plan: its GPUs and resources, and its settings by area
    (``gpuprov.core.plan_areas``), every value checked and resolved. ``sharing`` is set on
    ``shared`` hosts, ``vgpu`` on ``vgpu`` hosts, ``budget`` on both."""

    name: str
    mode: str
    groups: tuple[str, ...]
    gpu_model: str
    gpu_count: int
    gpus: tuple[GpuPlan, ...]
    resources: dict[str, int]
    driver: Driver
    runtime: ContainerRuntime
    device_plugin: DevicePlugin
    mig: Mig
    kubelet: Kubelet
    agent: Agent
    node: Node
    pool: Pool
    timeouts: Timeouts
    health: Health
    queues: Queues
    canary: Canary
    fleet: Fleet
    sharing: Sharing | None = None
    budget: Budget | None = None
    vgpu: Vgpu | None = None  # the HAMi-core shares of a host in `vgpu`

    @property
    def mig_strategy(self) -> str | None:
        """The device plugin's MIG strategy: None unless the host is in ``mig``."""
        return self.mig.mig_strategy

    def document_settings(self) -> dict[str, Any]:
        """Every inventory key the host's mode reads, with its checked, resolved value."""
        out = {"gpu_model": self.gpu_model, "gpu_count": self.gpu_count}
        for name in (*AREAS, *MODE_AREAS, "vgpu"):
            value = getattr(self, name)
            if value is not None:
                out.update(settings_of(value))
        return {
            k: out[k]
            for k, var in VARIABLES.items()
            if k in out and (not var.modes or self.mode in var.modes)
        }

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "mode": self.mode,
            "groups": list(self.groups),
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "driver_version": self.driver.driver_version,
            "container_runtime": self.runtime.container_runtime,
            "mig_strategy": self.mig_strategy,
            # The key keeps its name; it holds time-slicing or MPS (``strategy``).
            "time_slicing": self.sharing.as_dict() if self.sharing else None,
            "vgpu": self.vgpu.as_dict() if self.vgpu else None,
            "kubelet_max_pods": self.kubelet.kubelet_max_pods,
            "resources": self.resources,
            "gpus": [g.as_dict() for g in self.gpus],
            "settings": self.document_settings(),
        }


@dataclass(frozen=True)
class ClusterPlan:
    inventory: str
    hosts: tuple[HostPlan, ...]
    # What the plan allows but the user must hear about on every plan and deploy (a memory
    # overcommit the inventory asked for), each as the line the user reads.
    warnings: tuple[str, ...] = ()

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)

    @property
    def totals(self) -> dict[str, int]:
        """Cluster-wide count per Kubernetes resource."""
        total: Counter[str] = Counter()
        for h in self.hosts:
            total.update(h.resources)
        return dict(sorted(total.items()))

    @property
    def vgpu_totals(self) -> dict[str, int]:
        """Cluster-wide vGPU shares, memory and cores, as each flavour's scheduler counts them."""
        total: Counter[str] = Counter()
        for h in self.hosts:
            if h.vgpu:
                total.update(h.vgpu.advertised)
        return dict(sorted(total.items()))

    def as_dict(self) -> dict:
        return {
            "schema": PLAN_SCHEMA,
            "inventory": self.inventory,
            "hosts": [h.as_dict() for h in self.hosts],
            "totals": self.totals,
            "vgpu_totals": self.vgpu_totals,
            "warnings": list(self.warnings),
        }


def build(
    inventory: InventoryData, limit: set[str] | None = None, strict: bool = False
) -> ClusterPlan:
    """Plan every host of ``inventory`` that is in a mode group (or only those in ``limit``).

    Raises InputError listing every problem found in the whole inventory, each once: a problem
    shared by many hosts (a bad value in a group) is one Problem naming them and counting them.
    With ``strict``, keys that are not gpuprov's (another tool's) are problems too.
    """
    hosts = []
    # Hosts with the same groups and host data get the same plan: plan the first of each kind
    # and reuse it (a fleet of thousands has a handful of kinds).
    planned: dict[tuple, tuple[HostPlan | None, list[Problem], list[Problem]]] = {}
    problems: list[Problem] = []
    warnings: list[Problem] = []
    for host in inventory.hosts:
        if limit is not None and host.name not in limit:
            continue
        kind = (host.groups, _fingerprint(host))
        if kind not in planned:
            planner = _HostPlanner(inventory, host, strict)
            planned[kind] = (planner.plan(), planner.problems, planner.warnings)
        plan, kind_problems, kind_warnings = planned[kind]
        problems += (dataclasses.replace(p, host=host.name) for p in kind_problems)
        warnings += (dataclasses.replace(w, host=host.name) for w in kind_warnings)
        if plan is not None:
            hosts.append(dataclasses.replace(plan, name=host.name))
    problems += _one_volcano_memory_factor(inventory.path, hosts)
    if problems:
        raise InputError(merged(problems))
    if not hosts:  # an empty plan would read as "all is well"
        nothing = (
            f"no {'selected ' if limit is not None else ''}host is in a mode group "
            f"({', '.join(MODES)})"
            if inventory.hosts
            else "the inventory defines no host"
        )
        raise InputError([Problem(inventory.path, f"{nothing}: nothing to plan")])
    return ClusterPlan(inventory.path, tuple(hosts), tuple(str(w) for w in merged(warnings)))


def _one_volcano_memory_factor(path: str, hosts: list[HostPlan]) -> list[Problem]:
    """Volcano's memory factor is one flag of its device plugin's DaemonSet and one key of its
    scheduler's device config, so every volcano host must plan the same one."""
    by_factor: dict[int, list[str]] = {}
    for host in hosts:
        if host.vgpu and host.vgpu.flavour == "volcano":
            by_factor.setdefault(host.vgpu.memory_factor, []).append(host.name)
    if len(by_factor) < 2:
        return []
    parts = "; ".join(f"{f} on {', '.join(names)}" for f, names in sorted(by_factor.items()))
    return [
        Problem(
            path,
            f"volcano hosts differ ({parts}); Volcano's device plugin and scheduler read one "
            "memory factor for the whole cluster",
            key="vgpu_memory_factor",
        )
    ]


def _fingerprint(host: InventoryHost) -> str:
    """The host's own data as text, so hosts with equal data share one plan; a host whose data
    has no text form (an integer past Python's str limit, an object whose repr fails) is its
    own kind."""
    try:
        return repr(sorted(host.host_data.items()))
    except Exception:
        return f"host {host.name}"


# Keys that say a host has GPUs for gpuprov: set for a host in no mode group, they mean the
# host was meant to be in one.
_GPU_KEYS = ("gpu_model", "gpu_count")


class _HostPlanner:
    def __init__(self, inventory: InventoryData, host: InventoryHost, strict: bool = False):
        self.inventory = inventory
        self.host = host
        self.strict = strict
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def problem(
        self, message: str, key: str | None = None, source: str | None = None, gpus: int = 0
    ) -> None:
        if source is None and key is not None:
            source = self.inventory.source_of(self.host, key)
        self.problems.append(
            Problem(self.inventory.path, message, source=source, key=key, gpus=gpus)
        )

    def plan(self) -> HostPlan | None:
        modes = [g for g in self.host.groups if g in MODES]
        if len(modes) > 1:
            self.problem(
                f"host is in more than one mode group ({', '.join(modes)}); "
                "a host has exactly one mode",
                source="groups",
            )
            return None
        if not modes:
            self.unplanned()
            return None
        mode = modes[0]
        settings = self.settings(mode)
        if self.problems:
            return None
        model = catalog.find_model(settings["gpu_model"])
        count = settings["gpu_count"]
        vgpu = self.vgpu(model, count, settings) if mode == "vgpu" else None
        if mode == "mig":
            gpus = self.mig_gpus(model, count, settings)
        else:
            shares = {
                "shared": settings.get("time_slicing_replicas"),
                "vgpu": vgpu and vgpu.split_count,
            }
            gpus = tuple(
                GpuPlan(i, model.alias, False, {}, (), shares.get(mode) or 1) for i in range(count)
            )
        if self.problems:
            return None
        sharing = None
        if mode == "shared":
            sharing = area(Sharing, settings, memory=self.share_memory(model, settings))
            if self.problems:
                return None
        resources = (
            dict(vgpu.allocatable)
            if vgpu
            else _resources(mode, gpus, sharing, settings["mig_strategy"])
        )
        # gpuprov's own key wins; Kubespray's (a number only) is read when gpuprov's is unset.
        max_pods = settings["gpuprov_kubelet_max_pods"] or settings["kubelet_max_pods"] or "auto"
        if max_pods == "auto":
            max_pods = KUBELET_DEFAULT_MAX_PODS + sum(g.replicas for g in gpus if g.replicas > 1)
        # Resolved once, here: the plan holds the number, under both keys.
        resolved = {"kubelet_max_pods": max_pods, "gpuprov_kubelet_max_pods": max_pods}
        areas = host_areas({**settings, **resolved}, mode)
        return HostPlan(
            name=self.host.name,
            mode=mode,
            groups=self.host.groups,
            gpu_model=model.alias,
            gpu_count=count,
            gpus=gpus,
            resources=resources,
            sharing=sharing,
            vgpu=vgpu,
            **areas,
        )

    def unplanned(self) -> None:
        """A host in no mode group is not a GPU host, unless its own data or one of its groups
        (not `all`) gives it GPU keys: then it was meant to be in a mode group."""
        for key in _GPU_KEYS:
            if key in self.host.data and self.inventory.source_of(self.host, key) != (
                self.inventory.describe_group("all")
            ):
                self.problem(
                    f"{key} is set but the host is in no mode group ({', '.join(MODES)}), so it "
                    "would not be planned",
                    key=key,
                )
                return

    def settings(self, mode: str) -> dict[str, Any]:
        data = self.host.data
        for key in data:
            if not isinstance(key, str):
                self.problem(f"keys must be strings, got {shown(key)}", source="host data")
                continue
            if key in VARIABLES or key.startswith("_"):
                continue
            guess = suggest(key)
            if guess:
                self.problem(f"unknown key; did you mean {guess}?", key=key)
            elif key.startswith(OWN_PREFIX):
                self.problem("unknown gpuprov key (see docs/variables.md)", key=key)
            elif self.strict and not key.startswith(PYINFRA_PREFIXES):
                self.problem("not a gpuprov key (another tool's; --strict refuses it)", key=key)
        settings: dict[str, Any] = {}
        for name, var in VARIABLES.items():
            if var.modes and mode not in var.modes:
                if name in data:
                    self.problem(_not_in_mode(name, data[name], mode, var.modes), key=name)
                continue
            value = data.get(name, var.default)
            if value is NOT_SET:
                self.problem(f"required for every host in {mode}", key=name, source=f"group {mode}")
                continue
            try:
                settings[name] = var.check(value)
            except ValueError as e:
                self.problem(str(e), key=name)
        for key, why in pool_problems(settings, mode):
            self.problem(why, key=key)
        settings.setdefault("mig_strategy", None)
        model = settings.get("gpu_model")
        if model is not None and catalog.find_model(model) is None:
            self.problem(catalog.load().unknown_model(model, shown), key="gpu_model")
        elif model is not None and mode == "mig" and not catalog.find_model(model).mig_capable:
            self.problem(
                f"{model} does not support MIG; put the host in shared or whole_card",
                key="gpu_model",
            )
        return settings

    def vgpu(self, model: catalog.GpuModel, count: int, settings: dict[str, Any]) -> Vgpu | None:
        """The host's vGPU shares, or None with problems: HAMi-core needs NVIDIA's runtime as the
        default (both plugins and the containers they serve get the driver through it), and
        only Volcano reads a memory factor, which must leave each GPU at least one unit."""
        flavour = settings["vgpu_flavour"]
        factor = settings["vgpu_memory_factor"]
        if not settings["container_runtime_default"]:
            self.problem(
                "a host in vgpu needs nvidia as the default container runtime (HAMi-core is "
                "loaded into containers the nvidia runtime starts); set it to true",
                key="container_runtime_default",
            )
        if flavour == "hami" and "vgpu_memory_factor" in self.host.data:
            self.problem(
                f"only the volcano flavour reads a memory factor (HAMi counts "
                f"{HAMI_MEMORY_RESOURCE} in MiB); remove it or set vgpu_flavour: volcano",
                key="vgpu_memory_factor",
            )
        elif factor > model.memory_mib:
            self.problem(
                f"must be at most the memory of one {model.alias} ({model.memory_mib} MiB), "
                f"or it advertises no {VOLCANO_MEMORY_RESOURCE}; got {factor}",
                key="vgpu_memory_factor",
            )
        split, scaling = settings["vgpu_split_count"], settings["vgpu_memory_scaling"]
        budget = settings["memory_per_share_gib"]
        self.budget(
            model,
            split,
            budget,
            settings,
            "lower vgpu_split_count or the budget",
            "HAMi's scheduler places pods by the memory they request, so pods that each request "
            "this budget do not all fit on the GPU",
        )
        if self.problems:
            return None
        shares = Vgpu.of(
            flavour,
            model.memory_mib,
            count,
            split,
            scaling,
            settings["vgpu_core_scaling"],
            factor,
        )
        memory = vgpu_share_memory(model.memory_mib, split, scaling, budget)
        return dataclasses.replace(shares, memory=memory)

    def share_memory(self, model: catalog.GpuModel, settings: dict[str, Any]) -> ShareMemory:
        """What one share of a ``shared`` host's GPU may use; a budget that overcommits the
        GPU is a problem, or with ``allow_memory_overcommit`` a warning."""
        replicas, budget = settings["time_slicing_replicas"], settings["memory_per_share_gib"]
        strategy = settings["sharing_strategy"]
        consequence = (
            "MPS still limits each client to memory / replicas"
            if strategy == SHARING_MPS
            else "time-slicing isolates no memory: pods that use their budget run the "
            "GPU out of memory (CUDA out-of-memory errors in every pod on it)"
        )
        fits = self.budget(
            model,
            replicas,
            budget,
            settings,
            "lower time_slicing_replicas or the budget",
            consequence,
        )
        if fits and budget is not None and strategy == SHARING_MPS:
            note = mps_budget_note(model.memory_mib, replicas, budget)
            if note:
                self.warn(note, key="memory_per_share_gib")
        return share_memory(model.memory_mib, replicas, budget, strategy)

    def budget(
        self,
        model: catalog.GpuModel,
        shares: int,
        budget: float | None,
        settings: dict[str, Any],
        remedy: str,
        consequence: str,
    ) -> bool:
        """Whether ``shares`` budgets fit one GPU; when not, a problem, or with
        ``allow_memory_overcommit`` a warning saying ``consequence``."""
        over = overcommitted(model.memory_mib, shares, budget) if budget is not None else None
        if over and not settings["allow_memory_overcommit"]:
            self.problem(
                f"{over} ({model.alias}); {remedy}, or set allow_memory_overcommit: true to plan "
                "it anyway",
                key="memory_per_share_gib",
            )
        elif over:
            self.warn(
                f"memory overcommitted (allow_memory_overcommit): {over} ({model.alias}); "
                f"{consequence}",
                key="memory_per_share_gib",
            )
        return over is None

    def warn(self, message: str, key: str) -> None:
        source = self.inventory.source_of(self.host, key)
        self.warnings.append(Problem(self.inventory.path, message, source=source, key=key))

    def mig_gpus(
        self, model: catalog.GpuModel, count: int, settings: dict[str, Any]
    ) -> tuple[GpuPlan, ...]:
        default = settings["mig_layout"]
        by_gpu = settings["mig_layout_by_gpu"]
        if default is None and not by_gpu:
            self.problem(
                "a host in mig needs mig_layout or mig_layout_by_gpu",
                key="mig_layout",
                source="group mig",
            )
            return ()
        for index in by_gpu:
            if index >= count:
                self.problem(
                    f"GPU index {index} does not exist (gpu_count is {count})",
                    key="mig_layout_by_gpu",
                )
        gpus = []
        # A default layout that does not fit is one problem, counting the GPUs it is on.
        misfits: dict[tuple[str, str], int] = {}
        for index in range(count):
            key = "mig_layout_by_gpu" if index in by_gpu else "mig_layout"
            wanted = by_gpu[index] if index in by_gpu else default
            if wanted is None:  # MIG off on this GPU
                gpus.append(GpuPlan(index, model.alias, False, {}, (), 1))
                continue
            layout = {p: c for p, c in wanted.items() if c}
            fit = solve(model, layout)
            if not fit.fits:
                where = f"GPU {index}: " if key == "mig_layout_by_gpu" else ""
                message = f"{where}{_layout_text(layout)} does not fit {model.alias}: {fit.reason}"
                misfits[(key, message)] = misfits.get((key, message), 0) + 1
                continue
            gpus.append(GpuPlan(index, model.alias, True, layout, fit.instances, 1))
        for (key, message), gpu_count in misfits.items():
            self.problem(message, key=key, gpus=gpu_count)
        if settings["mig_strategy"] == "single" and gpus:
            layouts = {tuple(sorted(g.layout.items())) for g in gpus}
            single = gpus[0].mig_enabled and len(gpus[0].layout) == 1
            if len(layouts) > 1 or not single or not all(g.mig_enabled for g in gpus):
                self.problem(
                    "mig_strategy single needs MIG on every GPU with one identical "
                    "single-profile layout (the device plugin refuses mixed device "
                    "types); use mixed",
                    key="mig_strategy",
                )
        return tuple(gpus)


def _not_in_mode(name: str, value: Any, mode: str, modes: tuple[str, ...]) -> str:
    """Why a host in ``mode`` may not set ``name``; MPS on a MIG host with the device plugin's
    own reasons (k8s-device-plugin cmd/nvidia-device-plugin/main.go validateFlags and
    internal/plugin/mps.go getMPSOptions)."""
    if name == "sharing_strategy" and value == SHARING_MPS and mode == "mig":
        return (
            "MPS cannot share MIG devices: NVIDIA's device plugin refuses MPS with migStrategy "
            "mixed ('using --mig-strategy=mixed is not supported with MPS') and MIG devices "
            "under single ('sharing using MPS is not supported for MIG devices'); put the host "
            "in shared (MIG off) for MPS"
        )
    return f"only hosts in {' or '.join(modes)} may set this; this host is in {mode}"


def _layout_text(layout: dict[str, int]) -> str:
    return " + ".join(f"{c} x {p}" for p, c in layout.items()) or "an empty layout"


def _resources(
    mode: str, gpus: tuple[GpuPlan, ...], sharing: Sharing | None, mig_strategy: str | None
) -> dict[str, int]:
    """The extended resources the node advertises, by the device plugin's naming rules."""
    out: Counter[str] = Counter()
    for gpu in gpus:
        out.update(gpu_resources(mode, gpu, sharing, mig_strategy))
    # A GPU with MIG on and no instances advertises nothing.
    return {k: v for k, v in sorted(out.items()) if v}


def gpu_resources(
    mode: str, gpu: GpuPlan, sharing: Sharing | None, mig_strategy: str | None
) -> dict[str, int]:
    """The devices NVIDIA's device plugin advertises for one GPU, per resource: its shares,
    its MIG instances, or the card. What the node loses when the plugin marks the GPU unhealthy.

    >>> gpu = GpuPlan(2, "A100-80GB", False, {}, (), 4)
    >>> gpu_resources("shared", gpu, Sharing("time-slicing", 4, True, False, "/run/nvidia/mps"), None)
    {'nvidia.com/gpu.shared': 4}
    """
    out: Counter[str] = Counter()
    if mode == "shared":
        assert sharing is not None
        name = GPU_RESOURCE + ".shared" if sharing.rename else GPU_RESOURCE
        out[name] += gpu.replicas
    elif gpu.mig_enabled and mig_strategy == "single":
        out[GPU_RESOURCE] += len(gpu.instances)
    elif gpu.mig_enabled:
        for instance in gpu.instances:
            out[MIG_RESOURCE_PREFIX + instance.profile.replace("+", ".")] += 1
    else:
        out[GPU_RESOURCE] += 1
    return {k: v for k, v in sorted(out.items()) if v}


def index_ranges(indices: list[int], separator: str = ",") -> str:
    """GPU indices as runs of consecutive ones.

    >>> index_ranges([0, 1, 2, 5]), index_ranges([0, 2, 3], ".")
    ('0-2,5', '0.2-3')
    """
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return separator.join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)
