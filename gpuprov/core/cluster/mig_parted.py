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

from gpuprov.core import catalog
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.mig.solver import solve
from gpuprov.core.plan import HostPlan, index_ranges
from gpuprov.host.contract import MIG_DISABLED_CONFIG, MIG_PARTED_CONFIG_VERSION
from gpuprov.host.mig.instance import Instance

PLACEMENT_WARNING = (
    "mig-parted cannot express placements: the MIG manager lets the driver choose each "
    "instance's slot, so a node gets gpuprov's profile counts but not necessarily its placements"
)
_DISABLED = ((("all",), ()),)  # every GPU, MIG off
_ITEM_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


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
        key = tuple((tuple(ix), tuple(sorted(layout.items()))) for layout, ix in groups)
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
                item["mig-enabled"] = bool(layout)
                if layout:
                    item["mig-devices"] = dict(sorted(layout, key=_largest_first))
                items.append(item)
        configs[entry["name"]] = items
    document = {"version": MIG_PARTED_CONFIG_VERSION, "mig-configs": dict(sorted(configs.items()))}
    return PartedExport(document, {h: entries[k]["name"] for h, k in host_keys.items()})


def _gpu_groups(host: HostPlan) -> list[tuple[dict[str, int], list]]:
    """The host's GPUs grouped by layout: [(layout, indices)], ``["all"]`` when one layout."""
    if host.mode != "mig":
        return [({}, ["all"])]
    groups: dict[tuple, list[int]] = {}
    for gpu in host.gpus:
        groups.setdefault(tuple(sorted(gpu.layout.items())), []).append(gpu.index)
    if len(groups) == 1:
        return [(dict(next(iter(groups))), ["all"])]
    return [(dict(layout), ix) for layout, ix in groups.items()]


def _config_name(host: HostPlan, groups: list[tuple[dict[str, int], list]]) -> str:
    """``all-disabled``, ``all-<layout>``, or per GPU group ``gpu0-6-<layout>_gpu7-<layout>``;
    a hash where that would not fit a label value (63 characters)."""
    if groups == [({}, ["all"])]:
        return MIG_DISABLED_CONFIG
    parts = []
    for layout, indices in groups:
        where = "all" if indices == ["all"] else "gpu" + index_ranges(indices, ".")
        parts.append(f"{where}-{layout_label(layout) or 'disabled'}")
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
    layout: dict[str, int] | None  # ``devices: all``
    by_gpu: dict[int, dict[str, int]] = field(default_factory=dict)
    placements: dict[str, tuple[Instance, ...]] = field(default_factory=dict)  # "all" / "GPU n"

    def group_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"gpu_model": self.model.alias}
        if self.layout is not None:
            data["mig_layout"] = self.layout
        if self.by_gpu:
            data["mig_layout_by_gpu"] = self.by_gpu
        return data

    def layouts(self, gpu_count: int) -> list[dict[str, int]]:
        """The layout of each of ``gpu_count`` GPUs, as the planner would give them."""
        return [self.by_gpu.get(i, self.layout or {}) for i in range(gpu_count)]


def parse(text: str, source: str) -> dict[str, Any]:
    """A mig-parted v1 document, checked as strictly as mig-parted (api/spec/v1) checks it."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError([Problem(source, f"not YAML: {e}")]) from None
    problems = []

    def bad(message: str, key: str | None = None) -> None:
        problems.append(Problem(source, message, key=key))

    if not isinstance(document, dict):
        raise InputError([Problem(source, "must be a mapping with version and mig-configs")])
    for key in document:
        if key not in ("version", "mig-configs"):
            bad("unexpected field; only version and mig-configs", key=str(key))
    if document.get("version") != MIG_PARTED_CONFIG_VERSION:
        bad(f"must be {MIG_PARTED_CONFIG_VERSION}, got {document.get('version')!r}", "version")
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        bad("must be a non-empty mapping of config name to entries", "mig-configs")
        raise InputError(problems)
    for name, items in configs.items():
        where = f"mig-configs.{name}"
        if not isinstance(items, list) or not items:
            bad("must be a non-empty list of entries", where)
            continue
        for n, item in enumerate(items):
            _check_item(item, f"{where}[{n}]", bad)
    if problems:
        raise InputError(problems)
    return document


def _check_item(item: Any, where: str, bad) -> None:
    if not isinstance(item, dict):
        bad("must be a mapping", where)
        return
    for key in item:
        if key not in _ITEM_KEYS:
            bad(f"unexpected field; one of {', '.join(_ITEM_KEYS)}", f"{where}.{key}")
    filters = item.get("device-filter", [])
    if isinstance(filters, str):
        filters = [filters]
    if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
        bad("must be a PCI id or a list of them (0x233010DE)", f"{where}.device-filter")
    devices = item.get("devices")
    if devices != "all" and not (
        isinstance(devices, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)
    ):
        bad(f"must be all or a list of GPU indices, got {devices!r}", f"{where}.devices")
    enabled = item.get("mig-enabled")
    if not isinstance(enabled, bool):
        bad(f"must be true or false, got {enabled!r}", f"{where}.mig-enabled")
    mig_devices = item.get("mig-devices")
    if enabled is True:
        if not isinstance(mig_devices, dict) or not all(
            isinstance(p, str) and isinstance(c, int) and not isinstance(c, bool) and c >= 0
            for p, c in mig_devices.items()
        ):
            bad(
                f"must map each profile to a count >= 0 when MIG is enabled, got {mig_devices!r}",
                f"{where}.mig-devices",
            )
    elif enabled is False and mig_devices:
        bad("must be empty when mig-enabled is false", f"{where}.mig-devices")


def import_config(
    document: dict[str, Any], source: str, name: str | None = None, model: str | None = None
) -> ImportedLayouts:
    """Config ``name`` (the only one if None) of a parsed document as gpuprov layouts.

    The model comes from ``model`` or the entries' ``device-filter``; later entries override
    earlier ones on the same GPU, as in mig-parted. Refuses (InputError) what the planner would.
    """
    configs = document["mig-configs"]
    if name is None:
        if len(configs) > 1:
            raise InputError(
                [
                    Problem(
                        source,
                        f"holds {len(configs)} configs; pick one with --config: "
                        + ", ".join(configs),
                    )
                ]
            )
        name = next(iter(configs))
    if name not in configs:
        raise InputError(
            [Problem(source, f"no config {name!r}; it has {', '.join(configs)}", key="--config")]
        )
    where = f"config {name}"
    items = configs[name]
    gpu = _import_model(items, source, where, model)
    default: dict[str, int] | None = None
    by_gpu: dict[int, dict[str, int]] = {}
    matched = False
    for item in items:
        filters = item.get("device-filter", [])
        filters = [filters] if isinstance(filters, str) else filters
        if filters and not _matches(gpu, filters):
            continue
        matched = True
        layout = {p: c for p, c in (item.get("mig-devices") or {}).items() if c}
        if item["mig-enabled"] and not layout:
            raise InputError(
                [
                    Problem(
                        source,
                        "MIG on with no instances has no gpuprov layout (an empty "
                        "layout turns MIG off)",
                        source=where,
                        key="mig-devices",
                    )
                ]
            )
        if item["devices"] == "all":
            default, by_gpu = layout, {}
        else:
            by_gpu.update({index: layout for index in item["devices"]})
    if not matched:
        raise InputError(
            [Problem(source, f"no entry applies to {gpu.alias} (device-filter)", source=where)]
        )
    if not default:
        default = None
    if default is None and not any(by_gpu.values()):
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
        if not layout:
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
    return ImportedLayouts(name, gpu, default, dict(sorted(by_gpu.items())), placements)


def layout_text(layout: dict[str, int]) -> str:
    """A layout as the planner words it in its messages: ``1 x 3g.40gb + 2 x 1g.10gb``."""
    return " + ".join(f"{c} x {p}" for p, c in layout.items()) or "an empty layout"


def _import_model(items: list, source: str, where: str, model: str | None) -> catalog.GpuModel:
    if model is not None:
        gpu = catalog.find_model(model)
        if gpu is None:
            raise InputError(
                [Problem("command line", catalog.load().unknown_model(model), key="--model")]
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
