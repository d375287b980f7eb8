"""``/etc/gpuprov/mig-layout.json`` from the plan and back: what the deploy writes on a ``mig``
host and what verify finds wrong with the file a host has.

The file's model and parser are the host's (``gpuprov.host.mig.layout``): the applier reads the
file with the same ``parse`` before it touches a GPU.

>>> render(plan)                                            # doctest: +SKIP
'{\n  "schema": "gpuprov.mig-layout/v1",\n  "gpus": [...'
"""

from __future__ import annotations

import json
from typing import Any

from gpuprov.core.errors import shown
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import MIG_LAYOUT_PATH, MIG_LAYOUT_SCHEMA, file_record_path
from gpuprov.host.mig.layout import GpuLayout, LayoutError, MigLayout, loads, slots_text

CHECK = "mig-layout"


def from_plan(plan: HostPlan) -> MigLayout:
    """The layout ``plan`` wants on its host; every GPU MIG off outside ``mig``."""
    mig = plan.mode == "mig"
    return MigLayout(
        gpus=tuple(
            GpuLayout(g.index, g.mig_enabled and mig, tuple(g.instances) if mig else ())
            for g in sorted(plan.gpus, key=lambda g: g.index)
        ),
        gpu_clients=tuple(plan.mig.gpu_clients),
        allow_reboot=bool(plan.mig.mig_reboot),
    )


def paths(plan: HostPlan) -> Wanted:
    """The files the probe must read for ``check``: the layout on every host (a leftover counts)
    and, on a ``mig`` host, gpuprov's record of it (``missing`` tells from it whether the file
    was removed after the deploy wrote it)."""
    return Wanted(files=(MIG_LAYOUT_PATH,) + recorded(plan, MIG_LAYOUT_PATH))


def recorded(plan: HostPlan, path: str) -> tuple[str, ...]:
    """The record of a MIG-host file ``path`` (``file_record_path``), on a ``mig`` host."""
    return (file_record_path(path),) if plan.mode == "mig" else ()


def missing(plan: HostPlan, path: str, files: dict[str, Any], check: str, why: str) -> Finding:
    """The finding for a MIG-host file ``path`` that a ``mig`` host lacks: drift whether or not
    the deploy ever wrote it, since ``why`` (what the next reboot loses) holds either way. The
    record of the file (kept while the file is gpuprov's, removed with it by the deploy) tells
    which: a record without its file is a file removed behind gpuprov's back.

    >>> missing(plan, MIG_LAYOUT_PATH, {}, CHECK, "...").found           # doctest: +SKIP
    'missing (the deploy has not written it)'
    """
    removed = files.get(file_record_path(path)) is not None
    found = (
        "missing (removed after the deploy wrote it)"
        if removed
        else ("missing (the deploy has not written it)")
    )
    return Finding(plan.name, None, check, f"{path} as planned", found, f"run the deploy: {why}")


def render(plan: HostPlan) -> str:
    """The text of mig-layout.json that the deploy writes on a host in ``mig``."""
    return from_plan(plan).text()


def leftover(plan: HostPlan, path: str, found: object) -> list[Finding]:
    """The finding for a MIG-host file (``path``, read as ``found``) on a host outside ``mig``.

    >>> leftover(plan, MIG_LAYOUT_PATH, None)                   # doctest: +SKIP
    []
    """
    if found is None:
        return []
    return [
        Finding(
            plan.name,
            None,
            "leftover",
            f"no {path} (not a MIG host)",
            "present",
            "run the deploy (it disables the boot unit and removes the file)",
        )
    ]


def check(plan: HostPlan, files: dict[str, Any]) -> list[Finding]:
    """Findings for the layout file a host has (``files`` as the probe read them).

    A stale file is drift a reboot would expose (the boot unit applies it), so every field is
    compared: each GPU's mode and instances, ``gpu_clients`` and ``allow_reboot``.
    """
    text = files.get(MIG_LAYOUT_PATH)
    host = plan.name
    if plan.mode != "mig":
        return leftover(plan, MIG_LAYOUT_PATH, text)
    hint = "run the deploy (the boot unit would apply the old layout)"
    if text is None:
        # What runs now is compared GPU by GPU from NVML, but the boot unit rebuilds the
        # instances from this file: without it the next reboot leaves the GPUs without them.
        why = "without this file the boot unit cannot rebuild the MIG instances after a reboot"
        return [missing(plan, MIG_LAYOUT_PATH, files, CHECK, why)]
    if not isinstance(text, str):  # the probe's {"error": why} marker
        why = f"not read: {_marker(text)}"
        return [Finding(host, None, CHECK, f"the planned layout in {MIG_LAYOUT_PATH}", why, hint)]
    try:
        found = loads(text)
    except LayoutError as e:
        return [
            Finding(
                host,
                None,
                CHECK,
                f"a valid {MIG_LAYOUT_SCHEMA} document in {MIG_LAYOUT_PATH}",
                _one_line(str(e)),
                f"fix or remove {MIG_LAYOUT_PATH}, then run the deploy",
            )
        ]
    want = from_plan(plan)
    out = []
    saved = {g.index: g for g in found.gpus}
    for gpu in want.gpus:
        entry = saved.pop(gpu.index, None)
        if entry is None or _gpu_key(entry) != _gpu_key(gpu):
            out.append(
                Finding(
                    host,
                    gpu.index,
                    CHECK,
                    _gpu_text(gpu),
                    "no entry" if entry is None else _gpu_text(entry),
                    hint,
                )
            )
    for extra in saved.values():
        out.append(
            Finding(
                host, extra.index, CHECK, "no entry (not a planned GPU)", _gpu_text(extra), hint
            )
        )
    if found.gpu_clients != want.gpu_clients:
        out.append(
            Finding(
                host,
                None,
                CHECK,
                f"gpu_clients {list(want.gpu_clients)}",
                f"gpu_clients {list(found.gpu_clients)}",
                hint,
            )
        )
    if found.allow_reboot != want.allow_reboot:
        out.append(
            Finding(
                host,
                None,
                CHECK,
                f"allow_reboot {json.dumps(want.allow_reboot)}",
                f"allow_reboot {json.dumps(found.allow_reboot)}",
                hint,
            )
        )
    return out


def _gpu_key(gpu: GpuLayout) -> tuple:
    return gpu.mig_enabled, sorted(
        (i.profile_id, i.profile, i.start, i.size) for i in gpu.instances
    )


def _gpu_text(gpu: GpuLayout) -> str:
    if not gpu.mig_enabled:
        return "MIG disabled"
    listed = ", ".join(
        f"{i.profile} (id {i.profile_id}) at {slots_text(i.start, i.size)}"
        for i in sorted(gpu.instances)
    )
    return f"MIG enabled: {listed or 'no instances'}"


def _marker(value: Any) -> str:
    """The reason in a probe's ``{"error": why}`` marker (anything else, shown safely)."""
    return str(value.get("error")) if isinstance(value, dict) else shown(value)


def _one_line(text: str) -> str:
    return text.replace("\n", " ")
