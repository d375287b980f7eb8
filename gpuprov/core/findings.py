"""A finding: one way a host differs from its plan, with what to do about it.

Every check (the MIG comparison and each managed file's module in ``gpuprov/core/hostfiles/``) returns
a list of these; ``gpuprov verify`` reports them per host and GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One way a host differs from its plan, with what to do about it.

    >>> Finding("gpu-1", 3, "mig-mode", "enabled", "disabled (pending enabled)",
    ...         "reboot or reset GPU 3 to apply the pending MIG mode").as_dict()["gpu"]
    3
    """

    host: str
    gpu: int | None
    check: str
    expected: str
    found: str
    hint: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu": self.gpu,
            "check": self.check,
            "expected": self.expected,
            "found": self.found,
            "hint": self.hint,
        }
