"""NVIDIA XID codes: what each means, which are critical by default, and the kernel-log line.

The driver logs an XID as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the
bus.`` (older drivers omit ``PCI:``). Meanings are summarised from NVIDIA's Xid catalog,
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and for the memory
repair codes 48/63/64 from https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html.

>>> parse("NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.")
((0, 59, 0), 79)
>>> meaning(79)
'GPU has fallen off the bus'
"""

from __future__ import annotations

import re

# code -> meaning, in NVIDIA's words where short, else a summary of the catalog row.
MEANINGS: dict[int, str] = {
    13: "graphics engine exception (usually the application)",
    31: "GPU memory page fault (usually the application)",
    43: "GPU stopped processing",
    45: "preemptive cleanup after earlier errors",
    48: "double-bit ECC error (uncorrectable memory error)",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "page retirement or row remapping recorded (reset the GPU to activate)",
    64: "page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

# The XIDs that make a GPU unfit for work until it is reset, repaired or replaced: the
# hardware-side rows of the catalog (memory, bus, NVLink, GSP), plus 75, which the Node Problem
# Detector articles cordon on beside 79 (its meaning is not in the table above: not verified
# against the catalog here). Overridable per group: ``health_critical_xids``.
DEFAULT_CRITICAL: tuple[int, ...] = (48, 64, 74, 75, 79, 95, 119, 120, 140)

_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\): "
    r"(\d{1,5}),"
)
_BUS_ID = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?")

PciKey = tuple[int, int, int]  # (domain, bus, device): how the kernel line names a GPU
# XID codes are small numbers (the catalog lists codes up to the low hundreds); a larger number
# on an XID line is not one.
CODE_MAX = 65535


def parse(message: str) -> tuple[PciKey, int] | None:
    """(the GPU's PCI key, the XID code) of a kernel message, or None when it is no XID line."""
    found = _LINE.search(message)
    if found is None:
        return None
    domain, bus, device, code = found.groups()
    if int(code) > CODE_MAX:
        return None
    return (int(domain, 16), int(bus, 16), int(device, 16)), int(code)


def pci_key(bus_id: str) -> PciKey | None:
    """The key of an NVML bus id (``00000000:07:00.0``), comparable with ``parse``'s.

    >>> pci_key("00000000:3B:00.0")
    (0, 59, 0)
    """
    found = _BUS_ID.fullmatch(bus_id)
    if found is None:
        return None
    return int(found[1], 16), int(found[2], 16), int(found[3], 16)


def kernel_bus_id(key: PciKey) -> str:
    """How the kernel line writes ``key``: ``0000:3b:00``."""
    return f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}"


def meaning(code: int) -> str:
    """The catalog's meaning of ``code``, or where to look it up."""
    return MEANINGS.get(code, "see NVIDIA's Xid catalog")


def line(bus_id: str, code: int, pid: int = 0, name: str = "") -> str:
    """The message the driver logs for XID ``code`` on the GPU at NVML ``bus_id``.

    >>> line("00000000:07:00.0", 79)
    'NVRM: Xid (PCI:0000:07:00): 79, pid=0, name=, GPU has fallen off the bus'
    """
    key = pci_key(bus_id)
    if key is None:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    return f"NVRM: Xid (PCI:{kernel_bus_id(key)}): {code}, pid={pid}, name={name}, {meaning(code)}"
