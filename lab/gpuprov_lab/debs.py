"""Build one Debian package with dpkg-deb, byte for byte the same on every run.

Every file gets the same mtime (SOURCE_DATE_EPOCH), root ownership and an explicit mode, so the
same input always gives the same ``.deb``.

>>> import tempfile, pathlib
>>> pkg = Package("hello-lab", "1.0-1", "Says hello.", files={"/usr/bin/hello-lab":
...               File(b"#!/bin/sh\\necho hello\\n", 0o755)})
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> build(pkg, out).name
'hello-lab_1.0-1_all.deb'
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

EPOCH = 1735689600  # 2025-01-01T00:00:00Z: the mtime of every file in every lab package
MAINTAINER = "gpuprov lab <lab@gpuprov.invalid>"


@dataclass(frozen=True)
class File:
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Package:
    """A binary package: control fields, files by absolute path, maintainer scripts by name."""

    name: str
    version: str
    description: str
    files: dict[str, File] = field(default_factory=dict)
    scripts: dict[str, bytes] = field(default_factory=dict)  # postinst, prerm, ...
    depends: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    section: str = "misc"
    source: str | None = None  # the source package, when it is not named like the binary

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_all.deb"

    def control(self) -> str:
        fields = [
            ("Package", self.name),
            ("Version", self.version),
            ("Architecture", "all"),
            ("Maintainer", MAINTAINER),
            ("Section", self.section),
            ("Priority", "optional"),
        ]
        if self.source:
            fields.insert(1, ("Source", self.source))
        if self.depends:
            fields.append(("Depends", ", ".join(self.depends)))
        if self.provides:
            fields.append(("Provides", ", ".join(self.provides)))
        summary, _, body = self.description.partition("\n")
        lines = [f"{k}: {v}" for k, v in fields] + [f"Description: {summary}"]
        lines += [f" {line}" if line else " ." for line in body.splitlines()]
        return "\n".join(lines) + "\n"


def build(package: Package, out_dir: Path) -> Path:
    """Write ``package`` as ``out_dir/<name>_<version>_all.deb`` and return its path."""
    with tempfile.TemporaryDirectory(prefix="gpuprov-deb-") as tmp:
        root = Path(tmp) / "root"
        _put(root / "DEBIAN" / "control", File(package.control().encode()))
        for name, script in package.scripts.items():
            _put(root / "DEBIAN" / name, File(script, 0o755))
        for dest, file in package.files.items():
            _put(root / dest.lstrip("/"), file)
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)  # whatever the umask of the caller
            os.utime(path, (EPOCH, EPOCH))
        target = out_dir / package.filename
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)}
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(target)],
            check=True,
            capture_output=True,
            env=env,
        )
        return target


def _put(path: Path, file: File) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(file.content)
    path.chmod(file.mode)
