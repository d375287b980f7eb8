"""Write a pyinfra inventory (and its group_data files) for a test."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_inventory(directory: Path, inventory: str, **group_files: str) -> Path:
    """``directory/inv.py`` holding ``inventory``, plus ``group_data/<group>.py`` per keyword."""
    (directory / "group_data").mkdir(exist_ok=True)
    for name, text in group_files.items():
        (directory / "group_data" / f"{name}.py").write_text(textwrap.dedent(text))
    path = directory / "inv.py"
    path.write_text(textwrap.dedent(inventory))
    return path
