"""The NVIDIA device plugin's config file (k8s-device-plugin ``api/config/v1``): time-slicing or
MPS on ``shared`` hosts, the MIG strategy on ``mig`` hosts, no file on ``whole_card`` hosts, and
none on ``vgpu`` hosts, where the flavour's own plugin serves the GPUs (NVIDIA's must not serve
them too).

One typed model, ``DevicePluginConfig``, holds the part of the schema gpuprov sets; the deploy
writes ``render(plan)`` and verify reads a host's file back into the same model with
``check(plan, files)``. Reading follows the plugin's own parser (sigs.k8s.io/yaml into the Go
structs of api/config/v1, https://github.com/NVIDIA/k8s-device-plugin/tree/main/api/config/v1):
unknown keys are ignored, a value of the wrong shape (``timeSlicing: [1]``) or type (a quoted
bool) makes the plugin refuse the file, so it is a finding here; an empty ``version`` means v1 and
an absent ``migStrategy`` means none.

>>> from gpuprov.core.hostfiles.documents import parse
>>> planned = DevicePluginConfig(time_slicing=ReplicatedConfig(True, True, 4))
>>> got, problems = DevicePluginConfig.from_document(parse("yaml", planned.yaml()))
>>> got.fields() == planned.fields(), problems
(True, [])
>>> DevicePluginConfig.from_document({"sharing": {"timeSlicing": [1]}})[1]
['sharing.timeSlicing: a list, not a mapping']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import Report, kind, one_line, shown
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    DEVICE_PLUGIN_CONFIG_VERSION,
    GPU_RESOURCE,
    SHARING_MPS,
    SHARING_TIME_SLICING,
)

CHECK = "device-plugin"
# The plugin adds the nvidia.com/ prefix to a bare resource name (k8s-device-plugin
# api/config/v1/resources.go), so "gpu" and "nvidia.com/gpu" are one resource.
_GPU_NAMES = (GPU_RESOURCE, GPU_RESOURCE.rsplit("/", 1)[1])
# Modes whose hosts have no NVIDIA device plugin config: whole cards are the plugin's defaults;
# on vgpu hosts the flavour's plugin advertises the GPUs and NVIDIA's plugin stays off.
_NO_CONFIG = ("whole_card", "vgpu")


@dataclass(frozen=True)
class ReplicatedConfig:
    """``sharing.timeSlicing`` or ``sharing.mps`` with its one ``nvidia.com/gpu`` resource.

    Values are kept as the file spells them (``"true"`` stays a string), so a wrong type is
    reported as the value it is; None stands for "unset"."""

    rename_by_default: Any
    fail_requests_greater_than_one: Any
    replicas: Any


# The config's key of each sharing strategy (api/config/v1/sharing.go).
_SHARING_KEYS = {SHARING_TIME_SLICING: "timeSlicing", SHARING_MPS: "mps"}


@dataclass(frozen=True)
class DevicePluginConfig:
    """The device plugin config gpuprov writes: time-slicing or MPS on ``shared`` hosts (never
    both: MPS wins, https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/api/config/v1/sharing.go),
    the MIG strategy on ``mig`` hosts. ``sharing`` holds the keys found under ``sharing``."""

    version: Any = DEVICE_PLUGIN_CONFIG_VERSION
    mig_strategy: Any = "none"
    time_slicing: ReplicatedConfig | None = None
    mps: ReplicatedConfig | None = None
    mps_root: Any = None  # flags.mpsRoot: the plugin refuses MPS without it
    sharing: tuple[str, ...] = ()

    @classmethod
    def planned(cls, plan: HostPlan) -> DevicePluginConfig | None:
        """The config ``plan`` asks for; None on a ``whole_card`` or ``vgpu`` host (no file)."""
        if plan.mode in _NO_CONFIG:
            return None
        sharing = plan.sharing
        if plan.mode == "shared" and sharing is not None:
            # failRequestsGreaterThanOne is always written: the plugin defaults it to false
            # for time-slicing and to true for MPS (api/config/v1/config.go NewConfig).
            shared = ReplicatedConfig(
                sharing.rename, sharing.fail_requests_greater_than_one, sharing.replicas
            )
            if sharing.strategy == SHARING_MPS:
                return cls(mps=shared, mps_root=sharing.mps_root, sharing=(sharing.section,))
            return cls(time_slicing=shared, sharing=(sharing.section,))
        return cls(mig_strategy=plan.mig_strategy or "none")

    @property
    def strategy(self) -> str | None:
        """The sharing the plugin runs with this config: MPS wins when both are set."""
        if self.mps is not None:
            return SHARING_MPS
        return SHARING_TIME_SLICING if self.time_slicing is not None else None

    @classmethod
    def from_document(cls, doc: Any) -> tuple[DevicePluginConfig | None, list[str]]:
        """The model of a parsed file and the shape problems that make the plugin refuse it."""
        if not isinstance(doc, Mapping):
            return None, [f"the file holds {kind(doc)}, not a mapping"]
        problems: list[str] = []
        flags = _mapping(doc, "flags", "flags", problems)
        sharing = _mapping(doc, "sharing", "sharing", problems)
        # failRequestsGreaterThanOne unset: false for time-slicing, true for MPS (the plugin
        # keeps MPS's historical behaviour, api/config/v1/config.go NewConfig).
        time_slicing = _replicated(sharing, "timeSlicing", False, problems)
        mps = _replicated(sharing, "mps", True, problems)
        if problems:
            return None, problems
        return cls(
            # An empty version is v1, an absent strategy none (api/config/v1/config.go).
            version=_or_default(doc.get("version"), DEVICE_PLUGIN_CONFIG_VERSION),
            mig_strategy=_or_default((flags or {}).get("migStrategy"), "none"),
            time_slicing=time_slicing,
            mps=mps,
            mps_root=(flags or {}).get("mpsRoot"),
            sharing=tuple(str(k) for k in sharing or {}),
        ), []

    def fields(self) -> dict[str, Any]:
        """The compared values, by the name a finding gives them."""
        out = {"version": self.version, "flags.migStrategy": self.mig_strategy}
        if self.mps is not None:
            out["flags.mpsRoot"] = self.mps_root
        for key, section in (("timeSlicing", self.time_slicing), ("mps", self.mps)):
            if section is not None:
                out[f"sharing.{key}.renameByDefault"] = section.rename_by_default
                out[f"sharing.{key}.failRequestsGreaterThanOne"] = (
                    section.fail_requests_greater_than_one
                )
                # Time-slicing's keeps the name findings have always had.
                label = "" if key == "timeSlicing" else f"sharing.{key} "
                out[f"{label}{GPU_RESOURCE} replicas"] = section.replicas
        return out

    def document(self) -> dict[str, Any]:
        """The config as the plugin reads it (a dict of api/config/v1)."""
        flags: dict[str, Any] = {"migStrategy": self.mig_strategy}
        if self.mps is not None:
            flags["mpsRoot"] = self.mps_root
        out: dict[str, Any] = {"version": self.version, "flags": flags}
        for key, section in (("timeSlicing", self.time_slicing), ("mps", self.mps)):
            if section is not None:
                out.setdefault("sharing", {})[key] = {
                    "renameByDefault": section.rename_by_default,
                    "failRequestsGreaterThanOne": section.fail_requests_greater_than_one,
                    "resources": [{"name": GPU_RESOURCE, "replicas": section.replicas}],
                }
        return out

    def yaml(self) -> str:
        """The document as YAML, one key a line in the plugin's documented order."""
        doc = self.document()
        lines = [f"version: {doc['version']}", "flags:", f"  migStrategy: {self.mig_strategy}"]
        if "mpsRoot" in doc["flags"]:
            # A JSON string is a YAML string: a path with ": " or "#" stays one value.
            lines.append(f"  mpsRoot: {json.dumps(doc['flags']['mpsRoot'])}")
        for key, section in doc.get("sharing", {}).items():
            [resource] = section["resources"]
            lines += [
                "sharing:",
                f"  {key}:",
                f"    renameByDefault: {json.dumps(section['renameByDefault'])}",
                "    failRequestsGreaterThanOne: "
                + json.dumps(section["failRequestsGreaterThanOne"]),
                "    resources:",
                f"      - name: {resource['name']}",
                f"        replicas: {resource['replicas']}",
            ]
        return "\n".join(lines) + "\n"


def paths(plan: HostPlan) -> Wanted:
    """The config file, read on every host (a file left on a ``whole_card`` or ``vgpu`` host is
    seen)."""
    return Wanted(files=(plan.device_plugin.device_plugin_config_path,))


def document(plan: HostPlan) -> dict[str, Any] | None:
    """The config ``plan`` asks for as a dict; None on a ``whole_card`` or ``vgpu`` host."""
    config = DevicePluginConfig.planned(plan)
    return None if config is None else config.document()


def render(plan: HostPlan) -> str | None:
    """The text the deploy writes at ``device_plugin_config_path``; None: the host has none.

    >>> print(render(plan))                                      # doctest: +SKIP
    # NVIDIA device plugin config for gpu-1 (mig), written by gpuprov from its plan.
    # Schema: k8s-device-plugin api/config/v1; the plugin re-reads it on SIGHUP.
    version: v1
    flags:
      migStrategy: mixed
    """
    config = DevicePluginConfig.planned(plan)
    if config is None:
        return None
    return (
        f"# NVIDIA device plugin config for {one_line(plan.name)} ({plan.mode}), written by "
        "gpuprov from its plan.\n"
        "# Schema: k8s-device-plugin api/config/v1; the plugin re-reads it on SIGHUP.\n"
        + config.yaml()
    )


def check(plan: HostPlan, files: Mapping[str, str | None]) -> list[Finding]:
    """Findings for the host's config file against ``plan``; [] when the plugin would run as
    planned."""
    report = Report(plan.name)
    path = plan.device_plugin.device_plugin_config_path
    want = DevicePluginConfig.planned(plan)
    hint = f"run the deploy (it rewrites {path})"
    if want is None:
        if files.get(path) is not None:
            report.add(
                "leftover",
                f"no device plugin config at {path}",
                "a config file",
                "run the deploy (it removes the file, keeping a backup)",
            )
        return report.findings
    if files.get(path) is None:
        report.add(CHECK, f"config at {path}", "missing", "run the deploy")
        return report.findings
    present, doc = report.read(files, "yaml", path, CHECK)
    if not present:
        return report.findings
    got, problems = DevicePluginConfig.from_document(doc)
    for problem in problems:
        report.add(CHECK, f"a device plugin config (api/config/v1) in {path}", problem, hint)
    if got is None:
        return report.findings
    compared = want.fields()
    if want.time_slicing is not None and got.mps is not None:
        report.add(
            CHECK,
            "sharing.timeSlicing only",
            "sharing.mps is set (MPS wins over time-slicing)",
            hint,
        )
    elif want.mps is not None and got.mps is None:
        # One finding for the strategy, not one per missing MPS key.
        report.add(CHECK, "sharing.mps (MPS)", f"sharing: {_sharing_text(got)}", hint)
        compared = {
            k: v for k, v in compared.items() if not k.startswith(("sharing.", "flags.mps"))
        }
    elif want.mps is not None and got.time_slicing is not None:
        report.add(
            "leftover",
            "sharing.mps only",
            "sharing.timeSlicing is set too (ignored while sharing.mps is set)",
            hint,
        )
    elif want.strategy is None and got.sharing:
        report.add(
            "leftover", "no sharing section (MIG host)", f"sharing: {', '.join(got.sharing)}", hint
        )
    got_fields = got.fields()
    for key, value in compared.items():
        found = got_fields.get(key)
        # `true` and "true" differ: the plugin's parser rejects a quoted bool.
        if found != value or type(found) is not type(value):
            report.add(
                CHECK,
                f"{key}: {shown(value)}",
                "unset" if found is None else f"{key}: {shown(found)}",
                hint,
            )
    return report.findings


def _mapping(parent: Any, key: str, where: str, problems: list[str]) -> Mapping | None:
    """``parent[key]`` when it is a mapping; None when unset; a problem when anything else."""
    value = parent.get(key) if isinstance(parent, Mapping) else None
    if value is None or isinstance(value, Mapping):
        return value
    problems.append(f"{where}: {kind(value)}, not a mapping")
    return None


def _replicated(
    sharing: Mapping | None, key: str, fail_default: bool, problems: list[str]
) -> ReplicatedConfig | None:
    """``sharing[key]`` read as the plugin reads it (unset flags at their defaults), with its
    ``nvidia.com/gpu`` resource; None when the section is absent."""
    section = _mapping(sharing, key, f"sharing.{key}", problems)
    if section is None:
        return None
    where = f"sharing.{key}.resources"
    resources = section.get("resources")
    if resources is not None and not isinstance(resources, list):
        problems.append(f"{where}: {kind(resources)}, not a list")
        resources = None
    gpu = None
    for n, resource in enumerate(resources or []):
        if not isinstance(resource, Mapping):
            problems.append(f"{where}[{n}]: {kind(resource)}, not a mapping")
        elif gpu is None and resource.get("name") in _GPU_NAMES:
            gpu = resource
    return ReplicatedConfig(
        section.get("renameByDefault", False),
        section.get("failRequestsGreaterThanOne", fail_default),
        gpu.get("replicas") if gpu else None,
    )


def _sharing_text(config: DevicePluginConfig) -> str:
    return ", ".join(config.sharing) or "none"


def _or_default(value: Any, default: str) -> Any:
    """The plugin's reading of an optional string: unset or empty is the default."""
    return default if value is None or value == "" else value
