"""Read ``/etc/gpuprov/mig-layout.json`` on the host, through the one model of that file.

The deploy writes the file from the plan; the applier reads it at deploy time and at every boot,
so a hand edit is parsed and checked exactly as verify parses it
(``gpuprov/hostfiles/mig_layout.py``). The read is the probe's bounded one: a layout is a few
KiB, and a wrong path (a FIFO, a device, a huge file) is refused, not read.

>>> load("/etc/gpuprov/mig-layout.json").gpus[0].mig_enabled    # doctest: +SKIP
True
"""

from __future__ import annotations

from gpuprov.hostfiles.mig_layout import LayoutError, MigLayout, loads
from gpuprov.probe import read_file

__all__ = ["LayoutError", "MigLayout", "load"]


def load(path: str) -> MigLayout:
    """Parse the layout file at ``path``; raises LayoutError naming the file."""
    text = read_file(path)
    if text is None:
        raise LayoutError(f"{path}: cannot read the MIG layout: no such file")
    if isinstance(text, dict):
        raise LayoutError(f"{path}: cannot read the MIG layout: {text['error']}")
    try:
        return loads(text)
    except LayoutError as e:
        raise LayoutError(f"{path}: {e}") from None
