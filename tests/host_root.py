"""A simulated host's own /etc and /var/lib, for tests that run the real probe on this machine.

The deploy writes some files at fixed paths (``/etc/apt/...``, ``/etc/modprobe.d/...``,
``/etc/gpuprov/...``, the records under ``/var/lib/gpuprov``) and verify reads dpkg's database
and systemd's unit files there. A test host cannot have its own copies on this machine, and the
machine's must not be touched: ``interpreter`` writes a wrapper that runs the agent in a private
mount namespace where the host's files are laid over this machine's ``/etc`` and ``/var/lib``
(overlayfs; root only, as the tests that use it). The probe then reads them where a real host
keeps them, with the real ``dpkg-query`` and ``systemctl``; nothing outside the namespace changes.

    python = interpreter(tmp_path / "host", {"/etc/apt/preferences.d/x.pref": "..."},
                         packages={"nvidia-driver": {"version": "535.261.03-1", "held": True}},
                         enabled=["gpuprov-mig.service"])
    # gpuprov_python: python  (a path without spaces)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# The trees laid over this machine's: every fixed path gpuprov writes or verify reads is in one.
TREES = ("etc", "var/lib")

WRAPPER = """\
#!/bin/sh
# Run the agent with this host's /etc and /var/lib laid over the machine's (tests/host_root.py).
exec unshare -m sh -c '
mount --make-rprivate / || exit 1
for tree in {trees}; do
  mount -t overlay gpuprov-test-host \\
    -o "lowerdir=/$tree,upperdir=$0/upper/$tree,workdir=$0/work/$tree" "/$tree" || exit 1
done
exec "$@"' {root} {python} "$@"
"""


def interpreter(
    root: Path,
    files: Mapping[str, object],
    packages: Mapping[str, Mapping] | None = None,
    enabled: Iterable[str] = (),
    python: str = sys.executable,
) -> str:
    """Write the host's files under ``root`` and return the path of the interpreter wrapper.

    ``files``: path -> text (None: the host does not have it); ``packages``: dpkg's database of
    the host, name -> ``{"version", "held"}``; ``enabled``: units with a file in ``files``
    that start at boot (``WantedBy=multi-user.target``)."""
    if " " in str(root) or "'" in str(root):
        raise ValueError(f"{root}: gpuprov_python must be a path without spaces or quotes")
    for tree in TREES:
        (root / "upper" / tree).mkdir(parents=True, exist_ok=True)
        (root / "work" / tree).mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        if not isinstance(text, str):
            continue
        if not any(path.startswith(f"/{tree}/") for tree in TREES):
            raise ValueError(f"{path} is in none of /{', /'.join(TREES)}")
        target = root / "upper" / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if packages:
        status = root / "upper" / "var" / "lib" / "dpkg" / "status"
        status.parent.mkdir(parents=True, exist_ok=True)
        status.write_text("".join(_stanza(name, state) for name, state in packages.items()))
    wants = root / "upper" / "etc" / "systemd" / "system" / "multi-user.target.wants"
    for unit in enabled:
        wants.mkdir(parents=True, exist_ok=True)
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    wrapper = root / "python"
    wrapper.write_text(WRAPPER.format(trees=" ".join(TREES), root=root, python=python))
    wrapper.chmod(0o755)
    return str(wrapper)


def _stanza(name: str, state: Mapping) -> str:
    """One package in dpkg's status file (dpkg's own format, deb-status(5))."""
    want = "hold" if state["held"] else "install"
    return (
        f"Package: {name}\nStatus: {want} ok installed\nMaintainer: test <test@example.org>\n"
        f"Architecture: amd64\nVersion: {state['version']}\nDescription: {name}\n\n"
    )
