"""The lab's signed apt repositories of simulated NVIDIA packages, built once per content.

Each repository is flat, like NVIDIA's own (deb822 ``Suites: /``, no components), and signed
with a lab key (``InRelease`` and ``Release.gpg``). The build is cached in
``/var/tmp/gpuprov-lab-repo-<hash>``, where the hash covers every package's content, so a warm
``gpuprov lab up`` reuses it and any change to a package rebuilds it.

>>> repo = ensure()                                           # doctest: +SKIP
>>> sorted(p.name for p in (repo.www / "non-free").glob("nvidia-driver_*.deb"))  # doctest: +SKIP
['nvidia-driver_535.216.03-2~bpo12+1_all.deb', 'nvidia-driver_535.261.03-1_all.deb']
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpuprov_lab import debs, procs
from gpuprov_lab.errors import LabError
from gpuprov_lab.packages import repositories
from gpuprov_lab.rundir import CACHE, prune_cache

KEY_UID = "gpuprov lab repository <lab@gpuprov.invalid>"
FORMAT = "3"  # bump when the layout below changes, so old caches are not reused


@dataclass(frozen=True)
class Repo:
    path: Path

    @property
    def www(self) -> Path:
        """The directory the lab's HTTP server serves: one folder per repository."""
        return self.path / "www"

    @property
    def key(self) -> Path:
        """The armored public key that signs both repositories."""
        return self.path / "key.asc"


def content_hash() -> str:
    """A hash over every package of every repository (control, files, scripts)."""
    digest = hashlib.sha256(FORMAT.encode())
    for name, packages in sorted(repositories().items()):
        digest.update(name.encode())
        for package in packages:
            digest.update(package.control().encode())
            for path, file in sorted(package.files.items()):
                digest.update(f"{path}\0{file.mode:o}\0".encode() + file.content)
            for script, content in sorted(package.scripts.items()):
                digest.update(script.encode() + b"\0" + content)
    return digest.hexdigest()[:16]


def ensure() -> Repo:
    """The cached repository for the current packages, built first if missing."""
    repo = Repo(CACHE / f"gpuprov-lab-repo-{content_hash()}")
    if all((repo.www / name / "InRelease").is_file() for name in repositories()):
        return repo
    tmp = Repo(repo.path.with_name(repo.path.name + ".tmp"))
    shutil.rmtree(tmp.path, ignore_errors=True)
    tmp.www.mkdir(parents=True)
    gnupg = tmp.path / "gnupg"
    gnupg.mkdir(mode=0o700)
    try:
        _gpg(gnupg, "--quick-generate-key", KEY_UID, "ed25519", "sign", "never")
        tmp.key.write_bytes(_gpg(gnupg, "--armor", "--export", KEY_UID))
        for name, packages in repositories().items():
            folder = tmp.www / name
            folder.mkdir()
            for package in packages:
                debs.build(package, folder)
            _index(folder, gnupg)
    finally:
        _stop_agent(gnupg)
    tmp.path.rename(repo.path)
    prune_cache("gpuprov-lab-repo-", repo.path)
    return repo


def _index(folder: Path, gnupg: Path) -> None:
    """Packages, Packages.gz, Release, InRelease and Release.gpg for a flat repository."""
    packages = _run(["apt-ftparchive", "packages", "."], folder)
    (folder / "Packages").write_bytes(packages)
    (folder / "Packages.gz").write_bytes(gzip.compress(packages, mtime=debs.EPOCH))
    release = _run(
        [
            "apt-ftparchive",
            "-o",
            "APT::FTPArchive::Release::Origin=gpuprov lab",
            "-o",
            "APT::FTPArchive::Release::Label=gpuprov lab " + folder.name,
            "release",
            ".",
        ],
        folder,
    )
    (folder / "Release").write_bytes(release)
    _gpg(gnupg, "--clearsign", "--output", str(folder / "InRelease"), str(folder / "Release"))
    _gpg(
        gnupg,
        "--armor",
        "--detach-sign",
        "--output",
        str(folder / "Release.gpg"),
        str(folder / "Release"),
    )


def _gpg(gnupg: Path, *args: str) -> bytes:
    return _run(
        [
            "gpg",
            "--homedir",
            str(gnupg),
            "--batch",
            "--quiet",
            "--yes",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            *args,
        ],
        gnupg,
    )


def _stop_agent(gnupg: Path) -> None:
    """End the gpg-agent that gpg started for this key, by its pid."""
    result = subprocess.run(
        ["gpg-connect-agent", "--homedir", str(gnupg), "--no-autostart", "getinfo pid", "/bye"],
        capture_output=True,
        text=True,
    )
    for line in result.stdout.splitlines():
        if line.startswith("D ") and line[2:].strip().isdigit():
            pid = int(line[2:].strip())
            os.kill(pid, signal.SIGTERM)
            procs.wait_gone(pid, 5.0)


def _run(argv: list[str], cwd: Path) -> bytes:
    result = subprocess.run(argv, cwd=cwd, capture_output=True)
    if result.returncode != 0:
        raise LabError(
            f"building the lab repository: {' '.join(argv[:2])} failed: "
            f"{result.stderr.decode(errors='replace').strip()}"
        )
    return result.stdout
