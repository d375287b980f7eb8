"""mig-parted configs (``version: v1``, ``mig-configs:``) from the plan, and back into group data.

Export: one named entry per distinct set of per-GPU layouts, with the node label value each host
needs (``nvidia.com/mig.config``); ``device-filter`` (the catalog's PCI ids) on every item of an
entry that hosts of several models share. Import: a named entry of a mig-parted file becomes
``gpu_model`` / ``mig_layout`` / ``mig_layout_by_gpu``, each layout checked by the solver.

mig-parted has no placements: ``apply`` lets the driver pick each slot and retries orderings, so
an exported config reproduces gpuprov's profile counts, not its exact placements (NVIDIA/mig-parted
api/spec/v1: `mig-devices` holds counts only).

>>> layout_label({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
'3g.40gb-2g.20gb-2x1g.10gb'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuprov.core import bounded_yaml, catalog
from gpuprov.core.errors import InputError, Problem, shown
from gpuprov.core.mig.solver import solve
from gpuprov.core.plan import HostPlan, index_ranges
from gpuprov.core.variables import GPU_COUNT_MAX, MIG_COUNT_MAX, PROFILE_NAME_MAX
from gpuprov.host.contract import MIG_DISABLED_CONFIG, MIG_PARTED_CONFIG_VERSION
from gpuprov.host.mig.instance import Instance

PLACEMENT_WARNING = (
    "mig-parted cannot express placements: the MIG manager lets the driver choose each "
    "instance's slot, so a node gets gpuprov's profile counts but not necessarily its placements"
)
_DISABLED = ((("all",), None),)  # every GPU, MIG off
_ITEM_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
# A device filter lists a few PCI ids (mig-parted's own default config: 8), each `0xDDDDVVVV`
# with an optional `:subsystem`.
_FILTERS_MAX = 64
_PCI_ID_MAX = 32


# --- export --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartedExport:
    """The mig-parted document and the config name (``nvidia.com/mig.config``) of each host."""

    document: dict[str, Any]
    host_configs: dict[str, str]

    def text(self) -> str:
        return yaml.safe_dump(self.document, sort_keys=False)


def layout_label(layout: dict[str, int]) -> str:
    """A layout as part of a config name: largest first, ``+`` spelt ``.`` (label values)."""
    items = sorted(((p, c) for p, c in layout.items() if c), key=_largest_first)
    return "-".join(f"{c}x{p}" if c > 1 else p for p, c in items).replace("+", ".")


def export(hosts: Iterable[HostPlan]) -> PartedExport:
    """The mig-parted config for ``hosts``: MIG hosts get their layouts, hosts of MIG-capable
    models outside ``mig`` get ``all-disabled`` (gpuprov keeps MIG off there), others nothing.

    A GPU with MIG on and no instances (layout ``{}``) is mig-parted's ``mig-enabled: true``
    with empty ``mig-devices`` (its own example config ``all-enabled``, NVIDIA/mig-parted
    examples/config.yaml); a GPU with MIG off is ``mig-enabled: false``.

    ``all-disabled`` is always there, without a device filter: it is the MIG manager's default
    for nodes without the label, whatever their model.
    """
    # per-GPU structure -> {"models": ..., "name": ...}
    entries: dict[tuple, dict[str, Any]] = {_DISABLED: {"models": [], "name": MIG_DISABLED_CONFIG}}
    host_keys: dict[str, tuple] = {}
    for host in hosts:
        model = catalog.find_model(host.gpu_model)
        if model is None or not model.mig_capable:
            continue
        groups = _gpu_groups(host)
        key = tuple(
            (tuple(ix), None if layout is None else tuple(sorted(layout.items())))
            for layout, ix in groups
        )
        entry = entries.setdefault(key, {"models": [], "name": _config_name(host, groups)})
        if model.alias not in entry["models"]:
            entry["models"].append(model.alias)
        host_keys[host.name] = key
    configs: dict[str, list[dict[str, Any]]] = {}
    for key, entry in entries.items():
        if key == _DISABLED:
            configs[MIG_DISABLED_CONFIG] = [{"devices": "all", "mig-enabled": False}]
            continue
        items = []
        for alias in entry["models"]:
            model = catalog.find_model(alias)
            for indices, layout in key:
                item: dict[str, Any] = {}
                if len(entry["models"]) > 1:
                    item["device-filter"] = list(model.pci_device_ids)
                item["devices"] = "all" if indices == ("all",) else list(indices)
                item["mig-enabled"] = layout is not None
                if layout is not None:
                    item["mig-devices"] = dict(sorted(layout, key=_largest_first))
                items.append(item)
        configs[entry["name"]] = items
    document = {"version": MIG_PARTED_CONFIG_VERSION, "mig-configs": dict(sorted(configs.items()))}
    return PartedExport(document, {h: entries[k]["name"] for h, k in host_keys.items()})


def _gpu_groups(host: HostPlan) -> list[tuple[dict[str, int] | None, list]]:
    """The host's GPUs grouped by layout, None for MIG off: [(layout, indices)], ``["all"]``
    when one layout."""
    if host.mode != "mig":
        return [(None, ["all"])]
    groups: dict[tuple | None, list[int]] = {}
    for gpu in host.gpus:
        layout = tuple(sorted(gpu.layout.items())) if gpu.mig_enabled else None
        groups.setdefault(layout, []).append(gpu.index)
    out = [(None if layout is None else dict(layout), ix) for layout, ix in groups.items()]
    if len(out) == 1:
        return [(out[0][0], ["all"])]
    return out


def _config_name(host: HostPlan, groups: list[tuple[dict[str, int] | None, list]]) -> str:
    """``all-disabled``, ``all-enabled`` (MIG on, no instances), ``all-<layout>``, or per GPU
    group ``gpu0-6-<layout>_gpu7-<layout>``; a hash where that would not fit a label value
    (63 characters)."""
    if groups == [(None, ["all"])]:
        return MIG_DISABLED_CONFIG
    parts = []
    for layout, indices in groups:
        where = "all" if indices == ["all"] else "gpu" + index_ranges(indices, ".")
        what = "disabled" if layout is None else layout_label(layout) or "enabled"
        parts.append(f"{where}-{what}")
    name = "_".join(parts)
    if _LABEL_VALUE.fullmatch(name):
        return name
    digest = hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:10]
    return f"gpuprov-{digest}"


def _largest_first(item: tuple[str, int]) -> tuple:
    return -_slices(item[0]), item


def _slices(profile: str) -> int:
    match = re.match(r"(?:\d+c\.)?(\d+)g\.", profile)
    return int(match.group(1)) if match else 0


# --- import --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedLayouts:
    """One mig-parted config as gpuprov group data, with the placements the solver chose."""

    config: str
    model: catalog.GpuModel
    layout: dict[str, int] | None  # ``devices: all``; None: MIG off (or no such entry)
    by_gpu: dict[int, dict[str, int] | None] = field(default_factory=dict)  # None: MIG off
    placements: dict[str, tuple[Instance, ...]] = field(default_factory=dict)  # "all" / "GPU n"
    gpu_count: int | None = None  # the hosts' GPUs, when the import was told

    def group_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"gpu_model": self.model.alias}
        if self.gpu_count is not None:
            data["gpu_count"] = self.gpu_count
        if self.layout is not None:
            data["mig_layout"] = self.layout
        if self.by_gpu:
            data["mig_layout_by_gpu"] = self.by_gpu
        return data

    def layouts(self, gpu_count: int) -> list[dict[str, int] | None]:
        """The layout of each of ``gpu_count`` GPUs as the planner reads the group data: None
        for MIG off, ``{}`` for MIG on with no instances."""
        return [self.by_gpu[i] if i in self.by_gpu else self.layout for i in range(gpu_count)]


def parse(text: str | bytes, source: str) -> dict[str, Any]:
    """A mig-parted v1 document, checked as strictly as mig-parted (api/spec/v1) checks it, and
    bounded: loaded by ``gpuprov.core.bounded_yaml`` (no aliases, no deep nesting, no huge
    integers, UTF-8 only), GPU indices 0 to GPU_COUNT_MAX - 1, counts 0 to MIG_COUNT_MAX.

    Each distinct problem is one Problem: the same bad value in 5000 entries is one, naming
    the first entry and counting the others.
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        document = bounded_yaml.load(data)
    except bounded_yaml.YamlRefused as e:
        raise InputError([Problem(source, str(e))]) from None
    check = _Problems(source)
    if not isinstance(document, dict):
        raise InputError([Problem(source, "must be a mapping with version and mig-configs")])
    for key in document:
        if key not in ("version", "mig-configs"):
            check.bad("unexpected field; only version and mig-configs", _key_text(key))
    if document.get("version") != MIG_PARTED_CONFIG_VERSION:
        check.bad(
            f"must be {MIG_PARTED_CONFIG_VERSION}, got {shown(document.get('version'))}", "version"
        )
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        check.bad("must be a non-empty mapping of config name to entries", "mig-configs")
        raise InputError(check.problems())
    for name, items in configs.items():
        if not isinstance(name, str) or not name:
            check.bad(f"config names must be strings, got {shown(name)}", "mig-configs")
            continue
        where = f"mig-configs.{name}"
        if not isinstance(items, list) or not items:
            check.bad("must be a non-empty list of entries", where)
            continue
        for n, item in enumerate(items):
            _check_item(item, f"{where}[{n}]", check.bad)
    if check.found:
        raise InputError(check.problems())
    return document


class _Problems:
    """Problems of one file, each distinct message once with every place it was found."""

    def __init__(self, source: str):
        self.source = source
        self.found: dict[str, list[str]] = {}

    def bad(self, message: str, key: str) -> None:
        self.found.setdefault(message, []).append(key)

    def problems(self) -> list[Problem]:
        out = []
        for message, keys in self.found.items():
            more = f" [and {len(keys) - 1} more entries like it]" if len(keys) > 1 else ""
            out.append(Problem(self.source, message + more, key=keys[0]))
        return out


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else shown(key)


def _check_item(item: Any, where: str, bad) -> None:
    if not isinstance(item, dict):
        bad("must be a mapping", where)
        return
    for key in item:
        if key not in _ITEM_KEYS:
            bad(f"unexpected field; one of {', '.join(_ITEM_KEYS)}", f"{where}.{_key_text(key)}")
    filters = item.get("device-filter", [])
    if isinstance(filters, str):
        filters = [filters]
    if (
        not isinstance(filters, list)
        or len(filters) > _FILTERS_MAX
        or not all(isinstance(f, str) and 0 < len(f) <= _PCI_ID_MAX for f in filters)
    ):
        bad(
            f"must be a PCI id (0x233010DE) or a list of at most {_FILTERS_MAX}, got "
            f"{shown(filters)}",
            f"{where}.device-filter",
        )
    devices = item.get("devices")
    if devices != "all" and not (
        isinstance(devices, list)
        and devices
        and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < GPU_COUNT_MAX
            for d in devices
        )
    ):
        bad(
            f"must be all or a non-empty list of GPU indices 0 to {GPU_COUNT_MAX - 1} (the "
            f"driver handles at most {GPU_COUNT_MAX} GPUs), got {shown(devices)}",
            f"{where}.devices",
        )
    enabled = item.get("mig-enabled")
    if not isinstance(enabled, bool):
        bad(f"must be true or false, got {shown(enabled)}", f"{where}.mig-enabled")
    mig_devices = item.get("mig-devices")
    if enabled is True:
        if not isinstance(mig_devices, dict) or not all(
            isinstance(p, str)
            and 0 < len(p) <= PROFILE_NAME_MAX
            and isinstance(c, int)
            and not isinstance(c, bool)
            and 0 <= c <= MIG_COUNT_MAX
            for p, c in mig_devices.items()
        ):
            bad(
                f"must map each profile to a count 0 to {MIG_COUNT_MAX} (no GPU has more GPU "
                f"instances) when MIG is enabled, got {shown(mig_devices)}",
                f"{where}.mig-devices",
            )
    elif enabled is False and mig_devices:
        bad("must be empty when mig-enabled is false", f"{where}.mig-devices")


def import_config(
    document: dict[str, Any],
    source: str,
    name: str | None = None,
    model: str | None = None,
    gpu_count: int | None = None,
) -> ImportedLayouts:
    """Config ``name`` (the only one if None) of a parsed document as gpuprov layouts.

    The model comes from ``model`` or the entries' ``device-filter``; later entries override
    earlier ones on the same GPU, as in mig-parted. With ``gpu_count`` (the hosts' GPUs), a GPU
    index the hosts do not have is refused and the group data carries the count. Refuses
    (InputError) what the planner would.
    """
    configs = document["mig-configs"]
    if name is None:
        if len(configs) > 1:
            raise InputError(
                [
                    Problem(
                        source,
                        f"holds {len(configs)} configs; pick one with --config: " + _some(configs),
                    )
                ]
            )
        name = next(iter(configs))
    if name not in configs:
        raise InputError(
            [Problem(source, f"no config {shown(name)}; it has {_some(configs)}", key="--config")]
        )
    where = f"config {name}"
    items = configs[name]
    gpu = _import_model(items, source, where, model)
    # mig-parted's meaning: `mig-enabled: false` is MIG off (None), `mig-enabled: true` with
    # empty `mig-devices` MIG on with no instances ({}), as gpuprov's layouts say it.
    default: dict[str, int] | None = None
    by_gpu: dict[int, dict[str, int] | None] = {}
    matched = False
    for item in items:
        filters = item.get("device-filter", [])
        filters = [filters] if isinstance(filters, str) else filters
        if filters and not _matches(gpu, filters):
            continue
        matched = True
        layout = None
        if item["mig-enabled"]:
            layout = {p: c for p, c in (item.get("mig-devices") or {}).items() if c}
        if item["devices"] == "all":
            default, by_gpu = layout, {}
        else:
            by_gpu.update({index: layout for index in item["devices"]})
    if not matched:
        raise InputError(
            [Problem(source, f"no entry applies to {gpu.alias} (device-filter)", source=where)]
        )
    missing = sorted(i for i in by_gpu if gpu_count is not None and i >= gpu_count)
    if missing:
        raise InputError(
            [
                Problem(
                    source,
                    f"GPU index {index_ranges(missing)} does not exist (--gpu-count is "
                    f"{gpu_count}: GPUs 0 to {gpu_count - 1})",
                    source=where,
                    key="devices",
                )
            ]
        )
    if default is None and all(layout is None for layout in by_gpu.values()):
        raise InputError(
            [
                Problem(
                    source,
                    "turns MIG off on every GPU: put such hosts in shared or whole_card, not mig",
                    source=where,
                )
            ]
        )
    problems = []
    placements: dict[str, tuple[Instance, ...]] = {}
    for label, layout in [("all", default)] + [
        (f"GPU {i}", lay) for i, lay in sorted(by_gpu.items())
    ]:
        if layout is None:
            continue
        fit = solve(gpu, layout)
        if not fit.fits:
            prefix = "" if label == "all" else f"{label}: "
            problems.append(
                Problem(
                    source,
                    f"{prefix}{layout_text(layout)} does not fit {gpu.alias}: {fit.reason}",
                    source=where,
                    key="mig-devices",
                )
            )
        placements[label] = fit.instances
    if problems:
        raise InputError(problems)
    return ImportedLayouts(name, gpu, default, dict(sorted(by_gpu.items())), placements, gpu_count)


def _some(names: Iterable[str], most: int = 10) -> str:
    """The first ``most`` names, and how many more: a file of 20,000 configs is one line."""
    names = list(names)
    text = ", ".join(names[:most])
    return text + (f" and {len(names) - most} more" if len(names) > most else "")


def layout_text(layout: dict[str, int]) -> str:
    """A layout as the planner words it in its messages: ``1 x 3g.40gb + 2 x 1g.10gb``."""
    return " + ".join(f"{c} x {p}" for p, c in layout.items()) or "an empty layout"


def _import_model(items: list, source: str, where: str, model: str | None) -> catalog.GpuModel:
    if model is not None:
        gpu = catalog.find_model(model)
        if gpu is None:
            raise InputError(
                [Problem("command line", catalog.load().unknown_model(model, shown), key="--model")]
            )
        if not gpu.mig_capable:
            raise InputError(
                [Problem("command line", f"{gpu.alias} does not support MIG", key="--model")]
            )
        return gpu
    found = []
    for item in items:
        filters = item.get("device-filter", [])
        for pci_id in [filters] if isinstance(filters, str) else filters:
            gpu = _model_of(pci_id)
            if gpu is not None and gpu not in found:
                found.append(gpu)
    if len(found) == 1:
        return found[0]
    what = (
        f"has entries for several models ({', '.join(g.alias for g in found)})"
        if found
        else "names no GPU model the catalog knows (no device-filter)"
    )
    raise InputError([Problem(source, f"{what}; pass --model", source=where)])


def _model_of(pci_id: str) -> catalog.GpuModel | None:
    primary = pci_id.split(":")[0].lower()  # mig-parted >= 0.15 may add ":<subsystem id>"
    return next(
        (
            m
            for m in catalog.load().models.values()
            if primary in (i.lower() for i in m.pci_device_ids)
        ),
        None,
    )


def _matches(gpu: catalog.GpuModel, filters: list[str]) -> bool:
    return any(_model_of(f) is gpu for f in filters)
