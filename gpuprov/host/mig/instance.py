"""A planned GPU instance: a MIG profile at an exact placement.

Pure and stdlib-only: the planner, the diff, the deploy and the host-side applier (inside the
agent bundle, where the catalog is not importable) all speak it.

>>> Instance(4, 4, "3g.40gb", 9).compute_slices
3
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A GI profile name starts with its compute slice count: "3g.40gb", "1g.10gb+me" (NVIDIA MIG User
# Guide, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/).
_COMPUTE_SLICES = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True, order=True)
class Instance:
    """``start`` and ``size`` are in the model's memory-slot space; ``profile_id`` is NVML's id."""

    start: int
    size: int
    profile: str
    profile_id: int

    @property
    def compute_slices(self) -> int:
        """Slices of the full compute instance this GI gets (the ``N`` of ``Ng.Mgb``)."""
        match = _COMPUTE_SLICES.match(self.profile)
        if match is None:
            raise ValueError(f"{self.profile!r} is not a GPU instance profile name (Ng.Mgb)")
        return int(match.group(1))

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "profile_id": self.profile_id,
            "start": self.start,
            "size": self.size,
        }
