"""The plan document (``gpuprov.plan/v1``, what ``gpuprov plan --format json`` prints) read back
into the typed plan.

A plan document may have travelled (saved to a file, shipped to a node), so nothing in it is
trusted: every key is checked against the schema below and every setting by its registry check
(``Variable.check_planned``: a plan holds resolved values, ``kubelet_max_pods`` a number), and
the summary fields (``driver_version``, ``time_slicing``, ``totals``, ...) must agree with the
settings they repeat. A wrong document is an InputError naming the document, the host and the
key (exit 2 at the CLI edge), never a traceback. Pure: it reads a parsed document and touches
nothing (the local-file keys are checked for their shape only), so a node can read its own.

The schema, host by host (``ClusterPlan.as_dict``): ``name``, ``mode`` (one of MODES),
``groups``, ``gpu_model``, ``gpu_count``, ``gpus`` (``index``, ``model``, ``mig_enabled``,
``layout``, ``instances``, ``replicas``), ``resources``, ``settings`` (every inventory key the
host's mode reads, resolved), and the summary ``driver_version``, ``container_runtime``,
``mig_strategy``, ``kubelet_max_pods``, ``time_slicing`` (``shared``: the sharing, either
strategy) and ``vgpu`` (``vgpu``: the shares).

>>> read({"schema": "gpuprov.plan/v2"}, "plan.json")
Traceback (most recent call last):
...
gpuprov.core.errors.InputError: plan.json: schema: must be gpuprov.plan/v1, got 'gpuprov.plan/v2'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuprov.core import catalog
from gpuprov.core.errors import InputError, Problem, shown
from gpuprov.core.memory_budget import ShareMemory
from gpuprov.core.plan import ClusterPlan, GpuPlan, HostPlan
from gpuprov.core.plan_areas import Sharing, area, host_areas
from gpuprov.core.variables import VARIABLES
from gpuprov.core.vgpu import Vgpu
from gpuprov.host.contract import MODES, PLAN_SCHEMA
from gpuprov.host.mig.instance import Instance

_TOP = ("schema", "inventory", "hosts", "totals", "vgpu_totals", "warnings")
_HOST = (
    "name",
    "mode",
    "groups",
    "gpu_model",
    "gpu_count",
    "driver_version",
    "container_runtime",
    "mig_strategy",
    "time_slicing",
    "vgpu",
    "kubelet_max_pods",
    "resources",
    "gpus",
    "settings",
)
_GPU = ("index", "model", "mig_enabled", "layout", "instances", "replicas")
_INSTANCE = ("profile", "profile_id", "start", "size")
_SHARING = ("replicas", "rename", "fail_requests_greater_than_one", "strategy", "memory_per_share")
_VGPU = (
    "flavour",
    "split_count",
    "memory_scaling",
    "core_scaling",
    "memory_factor",
    "advertised",
    "allocatable",
    "memory_per_share",
)
_MEMORY = ("mib", "enforced", "enforced_by")
# Bounds of what one document may ask of its reader: far above any fleet, far below a hang.
MAX_HOSTS = 100_000
MAX_PROBLEMS = 20  # shown; the rest is counted
_COUNT_MAX = 2**31 - 1


class _Wrong(Exception):
    """One part of the document is wrong: ``key`` (a dotted path) and why."""

    def __init__(self, key: str, why: str):
        super().__init__(why)
        self.key, self.why = key, why


def read(doc: Any, where: str) -> ClusterPlan:
    """The typed plan of a parsed plan document (``where``: the file it came from, for the
    messages); InputError naming each wrong key.

    >>> read({"schema": "gpuprov.plan/v1", "inventory": "i.py", "hosts": [], "totals": {},
    ...     "vgpu_totals": {}, "warnings": []}, "plan.json")
    Traceback (most recent call last):
    ...
    gpuprov.core.errors.InputError: plan.json: hosts: must list 1 to 100000 hosts, got 0
    """
    try:
        # The schema first: a document of another version is told so, not its keys.
        schema = doc.get("schema") if isinstance(doc, Mapping) else None
        if schema != PLAN_SCHEMA:
            raise _Wrong("schema", f"must be {PLAN_SCHEMA}, got {shown(schema)}")
        top = _fields(doc, _TOP, "")
        inventory = _text(top["inventory"], "inventory")
        listed = _list(top["hosts"], "hosts")
        if not listed or len(listed) > MAX_HOSTS:
            raise _Wrong("hosts", f"must list 1 to {MAX_HOSTS} hosts, got {len(listed)}")
        for n, warning in enumerate(_list(top["warnings"], "warnings")):
            _typed(warning, str, f"warnings[{n}]")
    except _Wrong as e:
        raise InputError([Problem(where, e.why, key=e.key)]) from None
    hosts, problems, seen = [], [], set()
    for n, value in enumerate(listed):
        name = value.get("name") if isinstance(value, Mapping) else None
        host = name if isinstance(name, str) else None
        try:
            plan = _host(value, f"hosts[{n}]")
            if plan.name in seen:
                raise _Wrong(f"hosts[{n}].name", f"{shown(plan.name)} is listed twice")
            seen.add(plan.name)
            hosts.append(plan)
        except _Wrong as e:
            problems.append(Problem(where, e.why, host=host, key=e.key))
    if not problems:
        plan = ClusterPlan(inventory, tuple(hosts), tuple(top["warnings"]))
        for key, got, want in (
            ("totals", top["totals"], plan.totals),
            ("vgpu_totals", top["vgpu_totals"], plan.vgpu_totals),
        ):
            if got != want:
                problems.append(
                    Problem(
                        where, f"must be {shown(want)} (the hosts' sum), got {shown(got)}", key=key
                    )
                )
    if problems:
        more = len(problems) - MAX_PROBLEMS
        shown_problems = problems[:MAX_PROBLEMS]
        if more > 0:
            shown_problems.append(Problem(where, f"and {more} more problems"))
        raise InputError(shown_problems)
    return plan


def _host(doc: Any, at: str) -> HostPlan:
    value = _fields(doc, _HOST, at)
    name = _text(value["name"], f"{at}.name")
    mode = value["mode"]
    if mode not in MODES:
        raise _Wrong(f"{at}.mode", f"must be one of {', '.join(MODES)}, got {shown(mode)}")
    groups = tuple(
        _text(g, f"{at}.groups[{n}]") for n, g in enumerate(_list(value["groups"], f"{at}.groups"))
    )
    if mode not in groups:
        raise _Wrong(f"{at}.groups", f"must hold the host's mode {mode}, got {shown(list(groups))}")
    settings = _settings(value["settings"], mode, f"{at}.settings")
    model = catalog.find_model(settings["gpu_model"])
    if model is None or model.alias != settings["gpu_model"]:
        raise _Wrong(
            f"{at}.settings.gpu_model",
            f"must be a catalog alias, got {shown(settings['gpu_model'])}",
        )
    for key, want in (
        ("gpu_model", settings["gpu_model"]),
        ("gpu_count", settings["gpu_count"]),
        ("driver_version", settings["driver_version"]),
        ("container_runtime", settings["container_runtime"]),
        ("mig_strategy", settings.get("mig_strategy")),
        ("kubelet_max_pods", settings["kubelet_max_pods"]),
    ):
        _same(value[key], want, f"{at}.{key}")
    gpus = _list(value["gpus"], f"{at}.gpus")
    if len(gpus) != settings["gpu_count"]:
        raise _Wrong(
            f"{at}.gpus", f"must list gpu_count ({settings['gpu_count']}) GPUs, got {len(gpus)}"
        )
    sharing = None
    if mode == "shared":
        sharing = _sharing(value["time_slicing"], settings, f"{at}.time_slicing")
    else:
        _same(value["time_slicing"], None, f"{at}.time_slicing")
    vgpu = None
    if mode == "vgpu":
        vgpu = _vgpu(value["vgpu"], settings, f"{at}.vgpu")
    else:
        _same(value["vgpu"], None, f"{at}.vgpu")
    return HostPlan(
        name=name,
        mode=mode,
        groups=groups,
        gpu_model=settings["gpu_model"],
        gpu_count=settings["gpu_count"],
        gpus=tuple(_gpu(g, n, model.alias, f"{at}.gpus[{n}]") for n, g in enumerate(gpus)),
        resources=_counts(value["resources"], f"{at}.resources"),
        sharing=sharing,
        vgpu=vgpu,
        **host_areas(settings, mode),
    )


def _settings(doc: Any, mode: str, at: str) -> dict[str, Any]:
    """Every key the mode reads, each checked by the registry."""
    wanted = tuple(n for n, v in VARIABLES.items() if not v.modes or mode in v.modes)
    value = _fields(doc, wanted, at)
    out = {}
    for key in wanted:
        try:
            out[key] = VARIABLES[key].check_planned(value[key])
        except ValueError as e:
            raise _Wrong(f"{at}.{key}", str(e)) from None
    return out


def _sharing(doc: Any, settings: Mapping[str, Any], at: str) -> Sharing:
    value = _fields(doc, _SHARING, at)
    sharing = area(
        Sharing, settings, memory=_memory(value["memory_per_share"], f"{at}.memory_per_share")
    )
    for key in _SHARING[:-1]:
        _same(value[key], getattr(sharing, key), f"{at}.{key}")
    return sharing


def _vgpu(doc: Any, settings: Mapping[str, Any], at: str) -> Vgpu:
    value = _fields(doc, _VGPU, at)
    vgpu = area(
        Vgpu,
        settings,
        advertised=_counts(value["advertised"], f"{at}.advertised"),
        allocatable=_counts(value["allocatable"], f"{at}.allocatable"),
        memory=_memory(value["memory_per_share"], f"{at}.memory_per_share"),
    )
    for key in _VGPU[:5]:
        _same(value[key], getattr(vgpu, key), f"{at}.{key}")
    return vgpu


def _memory(doc: Any, at: str) -> ShareMemory | None:
    if doc is None:
        return None
    value = _fields(doc, _MEMORY, at)
    return ShareMemory(
        _integer(value["mib"], f"{at}.mib", 1),
        _typed(value["enforced"], bool, f"{at}.enforced"),
        _typed(value["enforced_by"], str, f"{at}.enforced_by"),
    )


def _gpu(doc: Any, index: int, model: str, at: str) -> GpuPlan:
    value = _fields(doc, _GPU, at)
    _same(value["index"], index, f"{at}.index")
    _same(value["model"], model, f"{at}.model")
    layout = _checked("mig_layout", _typed(value["layout"], dict, f"{at}.layout"), f"{at}.layout")
    instances = tuple(
        _instance(i, f"{at}.instances[{n}]")
        for n, i in enumerate(_list(value["instances"], f"{at}.instances"))
    )
    return GpuPlan(
        index,
        model,
        _typed(value["mig_enabled"], bool, f"{at}.mig_enabled"),
        layout,
        instances,
        _integer(value["replicas"], f"{at}.replicas", 1),
    )


def _instance(doc: Any, at: str) -> Instance:
    value = _fields(doc, _INSTANCE, at)
    return Instance(
        start=_integer(value["start"], f"{at}.start", 0),
        size=_integer(value["size"], f"{at}.size", 1),
        profile=_text(value["profile"], f"{at}.profile"),
        profile_id=_integer(value["profile_id"], f"{at}.profile_id", 0),
    )


# --- the shapes ----------------------------------------------------------------------------------


def _fields(doc: Any, keys: tuple[str, ...], at: str) -> Mapping[str, Any]:
    """``doc`` as a mapping with exactly ``keys`` (a missing or an unknown key is wrong)."""
    where = at or "the document"
    if not isinstance(doc, Mapping):
        raise _Wrong(at or "(top)", f"must be a mapping, got {shown(doc)}")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise _Wrong(f"{at + '.' if at else ''}{missing[0]}", f"missing from {where}")
    unknown = [k for k in doc if k not in keys]
    if unknown:
        raise _Wrong(f"{at + '.' if at else ''}{unknown[0]}", f"unknown key in {where}")
    return doc


def _list(doc: Any, at: str) -> list:
    if not isinstance(doc, list):
        raise _Wrong(at, f"must be a list, got {shown(doc)}")
    return doc


def _text(doc: Any, at: str) -> str:
    return _checked_by(VARIABLES["gpu_model"].check, doc, at)  # a short, clean string


def _typed(doc: Any, kind: type, at: str) -> Any:
    if type(doc) is not kind:
        raise _Wrong(at, f"must be {kind.__name__}, got {shown(doc)}")
    return doc


def _integer(doc: Any, at: str, minimum: int) -> int:
    if type(doc) is not int or not minimum <= doc <= _COUNT_MAX:
        raise _Wrong(at, f"must be an integer from {minimum} to {_COUNT_MAX}, got {shown(doc)}")
    return doc


def _counts(doc: Any, at: str) -> dict[str, int]:
    if not isinstance(doc, Mapping):
        raise _Wrong(at, f"must be a mapping of resource name to count, got {shown(doc)}")
    return {_text(k, f"{at} key"): _integer(v, f"{at}.{k}", 0) for k, v in doc.items()}


def _checked(key: str, doc: Any, at: str) -> Any:
    return _checked_by(VARIABLES[key].check_planned, doc, at)


def _checked_by(check: Callable[[Any], Any], doc: Any, at: str) -> Any:
    try:
        return check(doc)
    except ValueError as e:
        raise _Wrong(at, str(e)) from None


def _same(got: Any, want: Any, at: str) -> None:
    """A summary field must say what the settings say (``True`` is not ``1``)."""
    if got != want or type(got) is not type(want):
        raise _Wrong(at, f"must be {shown(want)} (as the settings say), got {shown(got)}")
