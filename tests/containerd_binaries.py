"""The real containerd binaries the runtime tests run: Debian's 1.6 on PATH and upstream 2.3.4
from ``../shared/bin/containerd.xz`` (relative to the repository root), decompressed once into a
cache outside the repository and checked against its published sha256."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuprov.core.hostfiles import containerd as hostfile
from gpuprov.core.hostfiles.documents import parse
from gpuprov.host import containerd_state
from gpuprov.host.contract import containerd_drop_in_path

ROOT = Path(__file__).resolve().parents[1]
# GPUPROV_SHARED names another checkout's shared directory (a git worktree has none beside it).
SHARED = Path(os.environ.get("GPUPROV_SHARED", ROOT.parent / "shared"))
UPSTREAM_XZ = SHARED / "bin" / "containerd.xz"
UPSTREAM_SHA256 = "91893aca8e819c4f53d836eb3857e612863431a4c89e4db7108c72622b801198"
CACHE = Path(os.environ.get("GPUPROV_BIN_CACHE", "/var/tmp/gpuprov-bin"))
HOW_TO = (
    f"containerd 2.3.4 not found: put the upstream binary, xz-compressed, at {UPSTREAM_XZ} "
    "or name the directory holding bin/containerd.xz in GPUPROV_SHARED "
    f"(sha256 of the binary {UPSTREAM_SHA256[:12]}...; see ../shared/bin/README.md)"
)


def debian_containerd() -> str:
    """Debian's containerd 1.6 (CI installs it with the lab's packages)."""
    path = shutil.which("containerd")
    if path is None:
        pytest.fail("containerd is not installed: apt-get install containerd")
    return path


def upstream_containerd() -> str:
    """containerd 2.3.4; skips (saying how to provide it) when the clone has no ../shared."""
    target = CACHE / "containerd-2.3.4"
    if not target.exists():
        if not UPSTREAM_XZ.exists():
            pytest.skip(HOW_TO)
        CACHE.mkdir(parents=True, exist_ok=True)
        data = lzma.decompress(UPSTREAM_XZ.read_bytes())
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.replace(target)
    if hashlib.sha256(target.read_bytes()).hexdigest() != UPSTREAM_SHA256:
        pytest.fail(f"{target}: sha256 differs from {UPSTREAM_SHA256}; remove it and rerun")
    return str(target)


def node_main(directory: Path, extra: str = "") -> Path:
    """A kubeadm-style main file whose root, state and sockets live in ``directory``, so a test
    can run containerd on it beside the machine's own."""
    main = directory / "config.toml"
    directory.mkdir(parents=True, exist_ok=True)
    main.write_text(
        f'version = 2\nroot = "{directory}/root"\nstate = "{directory}/state"\n{extra}'
        f'[grpc]\n  address = "{directory}/grpc.sock"\n'
        f'[ttrpc]\n  address = "{directory}/ttrpc.sock"\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd]\n    snapshotter = "native"\n'
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '      runtime_type = "io.containerd.runc.v2"\n'
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "        SystemdCgroup = true\n"
    )
    return main


@contextmanager
def running_containerd(binary: str, main: Path):
    """containerd on ``main`` in a private mount namespace, until the block ends (``timeout``
    stops it after 5 minutes whatever happens)."""
    log = (main.parent / "containerd.log").open("w")
    process = subprocess.Popen(
        ["timeout", "300", "unshare", "-m", binary, "--config", str(main)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    socket = main.parent / "grpc.sock"
    try:
        for _ in range(100):  # until it answers (the socket comes before the services)
            listed = socket.exists() and subprocess.run(
                ["ctr", "--address", str(socket), "plugins", "ls"], capture_output=True
            )
            if (listed and listed.returncode == 0) or process.poll() is not None:
                break
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def state_of(main: Path, sections, binary: str | None = None) -> dict:
    """The state command's sections for ``main``, with ``binary`` as the host's containerd."""
    env = dict(os.environ)
    if binary is not None:
        bindir = main.parent / "bin"
        bindir.mkdir(exist_ok=True)
        link = bindir / "containerd"
        if link.is_symlink() and os.readlink(link) != binary:
            link.unlink()  # another binary on the same files
        if not link.is_symlink():
            link.symlink_to(binary)
        env["PATH"] = f"{bindir}:{env['PATH']}"
    out = subprocess.run(
        [
            "sh",
            "-c",
            containerd_state.command(str(main), containerd_drop_in_path(str(main)), sections),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return containerd_state.parse(out.stdout.splitlines())


def write_rendered(main: Path, default: bool, binary: str | None = None) -> None:
    """Write what the deploy renders for ``main`` (read by ``binary``), as the deploy would."""
    state = state_of(main, ["version", "source", "imports"], binary)
    text = main.read_text() if main.exists() else None
    new_main, drop_in = hostfile.render_files(str(main), text, state, default)
    main.write_text(new_main)
    target = Path(containerd_drop_in_path(str(main)))
    target.parent.mkdir(exist_ok=True)
    target.write_text(drop_in)


def dump_as_at(binary: str, files: Path, at: str = "/etc/containerd") -> dict:
    """``config dump`` by ``binary`` of ``at``/config.toml with the directory ``files`` in place
    of ``at`` (bound over it in a private mount namespace: absolute imports resolve as on the
    host the files come from; nothing here changes)."""
    assert Path(at).is_dir(), f"{at} must exist here to be bound over (Debian's containerd has it)"
    script = 'set -e; mount --make-rprivate /; mount --bind "$1" "$2"; exec "$3" --config "$2/config.toml" config dump'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(files), at, binary],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return parse("toml", done.stdout)
