"""What a lab is made of: its hosts, each with a mode group and a simulated GPU set.

Pure data, no I/O beyond reading a `--spec` file. The default lab is one host per mode group;
`--hosts N` cycles through the same three kinds.

>>> [(h.name, h.group, h.model, h.count, h.ip) for h in default_spec(4)]  # doctest: +NORMALIZE_WHITESPACE
[('lab-a100-01', 'shared', 'A100-80GB', 8, '10.200.0.11'),
 ('lab-h100-01', 'mig', 'H100-80GB', 8, '10.200.0.12'),
 ('lab-h200-01', 'whole_card', 'H200-141GB', 4, '10.200.0.13'),
 ('lab-a100-02', 'shared', 'A100-80GB', 8, '10.200.0.14')]
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuprov.core import catalog
from gpuprov.core.errors import InputError, Problem
from gpuprov.host.contract import MODES

MAX_HOSTS = 64  # IPs 10.200.<slot>.11 .. 10.200.<slot>.74
# Several labs can run on one machine side by side, one per slot (``GPUPROV_LAB_SLOT``, 0-9,
# default 0): each has its own subnet, bridge, run directory and lock (``rundir``, ``network``).
SLOT_ENV = "GPUPROV_LAB_SLOT"
SLOTS = 10


def slot() -> int:
    """This process's lab slot; an unusable ``GPUPROV_LAB_SLOT`` is bad input.

    >>> slot()
    0
    """
    value = os.environ.get(SLOT_ENV, "0")
    if not (value.isascii() and value.isdigit() and int(value) < SLOTS):
        raise InputError(
            [
                Problem(
                    "environment",
                    f"must be a slot number 0-{SLOTS - 1}, got {value!r:.20}",
                    key=SLOT_ENV,
                )
            ]
        )
    return int(value)


SUBNET_PREFIX = f"10.200.{slot()}."
GATEWAY = SUBNET_PREFIX + "1"

# (group, model, count) of the default hosts, cycled for --hosts N.
KINDS = (("shared", "A100-80GB", 8), ("mig", "H100-80GB", 8), ("whole_card", "H200-141GB", 4))

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")


@dataclass(frozen=True)
class LabHost:
    """One lab host: inventory name, mode group, simulated GPUs, address and index (1-based),
    and the containerd binary it runs instead of Debian's 1.6 (None: Debian's)."""

    name: str
    group: str
    model: str
    count: int
    index: int
    containerd: str | None = None

    @property
    def ip(self) -> str:
        return f"{SUBNET_PREFIX}{10 + self.index}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ip": self.ip}


def default_spec(hosts: int = 3, containerd: str | None = None) -> list[LabHost]:
    """``hosts`` hosts cycling through the three kinds, named after their GPU model; each runs
    the ``containerd`` binary when one is given."""
    _check_host_count("--hosts", hosts)
    out, seen = [], {}
    for i in range(hosts):
        group, model, count = KINDS[i % len(KINDS)]
        seen[model] = seen.get(model, 0) + 1
        name = _default_name(model, seen[model])
        out.append(LabHost(name, group, model, count, i + 1, containerd))
    return out


def load_spec(path: str, containerd: str | None = None) -> list[LabHost]:
    """The hosts of a YAML spec file: a list of ``{name?, group, model, count, containerd?}``;
    ``containerd: upstream`` runs the binary given as ``containerd`` (``gpuprov lab up
    --containerd PATH``), ``debian`` (the default) Debian's own."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise InputError([Problem(path, f"cannot read the lab spec: {e.strerror}")]) from None
    except yaml.YAMLError as e:
        raise InputError([Problem(path, f"not valid YAML: {e}")]) from None
    if not isinstance(raw, list) or not raw:
        raise InputError(
            [Problem(path, "a lab spec is a non-empty list of {name?, group, model, count}")]
        )
    _check_host_count(path, len(raw))
    problems, hosts, seen = [], [], {}
    for i, entry in enumerate(raw, start=1):
        try:
            hosts.append(_entry(entry, i, seen, containerd))
        except ValueError as e:
            problems.append(Problem(path, f"host {i}: {e}"))
    names = [h.name for h in hosts]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(Problem(path, f"host name {name} is used twice"))
    if problems:
        raise InputError(problems)
    return hosts


def _entry(entry: Any, index: int, seen: dict[str, int], containerd: str | None) -> LabHost:
    if not isinstance(entry, dict):
        raise ValueError(f"must be a mapping with group, model and count, got {entry!r}")
    unknown = set(entry) - {"name", "group", "model", "count", "containerd"}
    if unknown:
        raise ValueError(
            f"unknown keys {', '.join(sorted(unknown))} (valid: name, group, model, count, "
            "containerd)"
        )
    choice = entry.get("containerd", "debian")
    if choice not in ("debian", "upstream"):
        raise ValueError(f"containerd must be debian or upstream, got {choice!r}")
    if choice == "upstream" and containerd is None:
        raise ValueError(
            "containerd: upstream needs a binary: gpuprov lab up --containerd PATH "
            "(e.g. containerd 2.3.4 from ../shared/bin/containerd.xz, decompressed)"
        )
    group = entry.get("group")
    if group not in MODES:
        raise ValueError(f"group must be one of {', '.join(MODES)}, got {group!r}")
    model_name = entry.get("model")
    model = catalog.find_model(model_name) if isinstance(model_name, str) else None
    if model is None:
        close = catalog.load().close_matches(str(model_name))
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"model {model_name!r} is not in the GPU catalog{hint}")
    if group == "mig" and not model.mig_capable:
        raise ValueError(f"model {model.alias} is not MIG capable, so it cannot be in group mig")
    count = entry.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 16:
        raise ValueError(f"count must be an integer from 1 to 16, got {count!r}")
    seen[model.alias] = seen.get(model.alias, 0) + 1
    name = entry.get("name") or _default_name(model.alias, seen[model.alias])
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be a host name (a-z, 0-9, '-'), got {name!r}")
    binary = containerd if choice == "upstream" else None
    return LabHost(name, group, model.alias, count, index, binary)


def _default_name(model: str, n: int) -> str:
    return f"lab-{model.split('-')[0].lower()}-{n:02d}"


def _check_host_count(where: str, n: int) -> None:
    if not 1 <= n <= MAX_HOSTS:
        raise InputError([Problem(where, f"a lab has 1 to {MAX_HOSTS} hosts, got {n}")])
