"""The GPU catalog: models and their MIG GPU-instance profiles, as shipped data.

>>> model = find_model("NVIDIA A100-SXM4-80GB")
>>> model.alias, model.profile("3g.40gb").placements
('A100-80GB', ((0, 4), (4, 4)))
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import yaml

Placement = tuple[int, int]  # (start, size) in the memory-slot space


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one model (e.g. 3g.40gb on A100-80GB)."""

    name: str
    id: int
    const: int
    compute_slices: int
    memory_slices: int
    max_instances: int
    memory_mib: int
    placements: tuple[Placement, ...]
    verified: bool
    sources: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: its NVML names, memory and (for MIG-capable models) its profiles."""

    alias: str
    nvml_names: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    memory_mib: int
    profiles: tuple[MigProfile, ...] = ()
    memory_slots: int = 0
    compute_slices: int = 0
    media_engine_sets: int = 0  # how many `+me` GPU instances may exist at once (gpus.yaml)
    sources: tuple[str, ...] = ()
    compute_capability: tuple[int, int] = (0, 0)  # (major, minor); (0, 0) when not recorded
    memory_repair: str = ""  # "row-remapping" or "page-retirement" (gpus.yaml); "" when unknown
    _by_name: dict[str, MigProfile] = field(default_factory=dict, compare=False, repr=False)

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    def profile(self, name: str) -> MigProfile | None:
        """The profile called ``name`` (``"3g.40gb"``), or None."""
        return self._by_name.get(name)

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        """The profile whose NVML id is ``profile_id`` (``9`` -> 3g.40gb on A100-80GB)."""
        return next((p for p in self.profiles if p.id == profile_id), None)


def _profile(raw: dict) -> MigProfile:
    return MigProfile(
        name=raw["name"],
        id=raw["id"],
        const=raw["const"],
        compute_slices=raw["compute_slices"],
        memory_slices=raw["memory_slices"],
        max_instances=raw["max_instances"],
        memory_mib=raw["memory_mib"],
        placements=tuple((s, z) for s, z in raw["placements"]),
        verified=raw["verified"],
        sources=tuple(raw["sources"]),
        note=raw.get("note", ""),
    )


def _model(alias: str, raw: dict) -> GpuModel:
    profiles = tuple(_profile(p) for p in raw.get("profiles", []))
    return GpuModel(
        alias=alias,
        nvml_names=tuple(raw["nvml_names"]),
        pci_device_ids=tuple(raw.get("pci_device_ids", [])),
        memory_mib=raw["memory_mib"],
        profiles=profiles,
        memory_slots=raw.get("memory_slots", 0),
        compute_slices=raw.get("compute_slices", 0),
        media_engine_sets=raw.get("media_engine_sets", 0),
        sources=tuple(raw.get("sources", [])),
        compute_capability=_compute_capability(raw.get("compute_capability", "0.0")),
        memory_repair=raw.get("memory_repair", ""),
        _by_name={p.name: p for p in profiles},
    )


def _compute_capability(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


@dataclass(frozen=True)
class Catalog:
    models: dict[str, GpuModel]
    sources: dict[str, str]

    def find(self, name: str) -> GpuModel | None:
        """A model by alias (``H100-80GB``) or NVML product name (``NVIDIA H100 80GB HBM3``)."""
        if name in self.models:
            return self.models[name]
        return next((m for m in self.models.values() if name in m.nvml_names), None)

    def close_matches(self, name: str) -> list[str]:
        """Aliases that look like a misspelt ``name`` (``A100-80G`` -> ``['A100-80GB']``)."""
        return difflib.get_close_matches(name, list(self.models), n=3, cutoff=0.5)

    def unknown_model(self, name: str, quoted: Callable[[str], str] = repr) -> str:
        """The message for a model the catalog lacks, with the likely one or the known ones;
        ``quoted`` renders the name (callers pass ``gpuprov.core.errors.shown``, which shortens
        a huge one).

        >>> load().unknown_model("A100-80G")
        "unknown GPU model 'A100-80G'; did you mean A100-80GB or H100-80GB or A100-40GB?"
        """
        close = self.close_matches(name)
        hint = (
            f"; did you mean {' or '.join(close)}?"
            if close
            else f"; known models: {', '.join(self.models)}"
        )
        return f"unknown GPU model {quoted(name)}{hint}"


@cache
def load() -> Catalog:
    """The catalog shipped in ``gpuprov/core/catalog/gpus.yaml``."""
    text = resources.files(__package__).joinpath("gpus.yaml").read_text()
    # libyaml's loader when PyYAML has it: 10x faster, and the simulated driver loads the
    # catalog in every probe on a lab host.
    raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return Catalog(
        models={alias: _model(alias, m) for alias, m in raw["models"].items()},
        sources=raw["sources"],
    )


def find_model(name: str) -> GpuModel | None:
    """Shorthand for ``load().find(name)``."""
    return load().find(name)
