"""Docker's ``daemon.json``: the nvidia runtime merged in, every other key kept (``exec-opts``
such as ``native.cgroupdriver=systemd`` included), and checked back.

>>> render_text('{"exec-opts": ["native.cgroupdriver=systemd"]}', default=True, path="daemon.json")
'{\\n  "exec-opts": [\\n    "native.cgroupdriver=systemd"\\n  ],\\n  "runtimes": {\\n    "nvidia": {\\n      "path": "nvidia-container-runtime",\\n      "args": []\\n    }\\n  },\\n  "default-runtime": "nvidia"\\n}\\n'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import Report, dig, scalar
from gpuprov.host.contract import (
    DOCKER_DAEMON_PATH,
    DOCKER_NVIDIA_RUNTIME_PATH,
    NVIDIA_RUNTIME,
    NVIDIA_RUNTIME_BINARY,
)

CHECK = "container-runtime"
# As nvidia-ctk writes it: docker resolves the bare name on PATH.
RUNTIME = {"path": DOCKER_NVIDIA_RUNTIME_PATH, "args": []}


class Refused(ValueError):
    """A daemon.json the deploy will not touch; the message names the file."""


def paths(plan) -> Wanted:
    """What the probe reads for ``check``."""
    return Wanted(files=(DOCKER_DAEMON_PATH,))


def merged(text: str | None, default: bool, path: str = DOCKER_DAEMON_PATH) -> dict[str, Any]:
    """The daemon.json settings with the nvidia runtime (and ``default-runtime`` when
    ``default``; a ``default-runtime`` of nvidia is dropped otherwise) applied."""
    try:
        config = json.loads(text) if text and text.strip() else {}
    except ValueError as e:
        raise Refused(f"{path}: not JSON ({e}); fix it by hand first") from None
    if not isinstance(config, dict):
        raise Refused(f"{path}: not a JSON object; fix it by hand first")
    runtimes = config.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise Refused(f"{path}: runtimes is not an object; fix it by hand first")
    config = dict(config)
    config["runtimes"] = {**runtimes, NVIDIA_RUNTIME: RUNTIME}
    if default:
        config["default-runtime"] = NVIDIA_RUNTIME
    elif config.get("default-runtime") == NVIDIA_RUNTIME:
        del config["default-runtime"]
    return config


def render_text(text: str | None, default: bool, path: str = DOCKER_DAEMON_PATH) -> str:
    """The daemon.json the deploy writes over ``text``; Refused when ``text`` is not an object."""
    return json.dumps(merged(text, default, path), indent=2) + "\n"


def render(plan, text: str | None) -> str:
    """``render_text`` for ``plan``."""
    return render_text(text, plan.runtime.container_runtime_default)


def is_configured(text: str | None, default: bool) -> bool:
    """Whether ``text`` already has everything ``merged`` would add (whatever its layout)."""
    try:
        return bool(text and text.strip()) and json.loads(text) == merged(text, default)
    except Refused:
        return False


def check(plan, files: Mapping[str, str | None]) -> list[Finding]:
    """Findings for the nvidia runtime (and default) in daemon.json."""
    report = Report(plan.name)
    hint = "run the deploy (then docker restarts)"
    if files.get(DOCKER_DAEMON_PATH) is None:
        report.add(CHECK, f"runtime nvidia in {DOCKER_DAEMON_PATH}", "missing file", hint)
        return report.findings
    present, doc = report.read(files, "json", DOCKER_DAEMON_PATH, CHECK)
    if not present:
        return report.findings
    if not isinstance(doc, Mapping):
        report.add(CHECK, f"a JSON object in {DOCKER_DAEMON_PATH}", type(doc).__name__, hint)
        return report.findings
    path = dig(doc, "runtimes", NVIDIA_RUNTIME, "path")
    if path not in (DOCKER_NVIDIA_RUNTIME_PATH, NVIDIA_RUNTIME_BINARY):
        report.add(
            CHECK,
            f"runtimes.nvidia.path {DOCKER_NVIDIA_RUNTIME_PATH}",
            "unset" if path is None else scalar(path),
            hint,
        )
    got = doc.get("default-runtime")
    if plan.runtime.container_runtime_default and got != NVIDIA_RUNTIME:
        report.add(
            CHECK,
            f'default-runtime "{NVIDIA_RUNTIME}"',
            "unset" if got is None else f"default-runtime {scalar(got)}",
            hint,
        )
    return report.findings
