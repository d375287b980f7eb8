"""Scratch directories for the daemons a test session starts (etcd, the API server, Kueue,
Volcano, SUC): short paths under /tmp, as their unix sockets need, removed when the session ends.

They outlive the test that made them (the daemons are shared by a module or the session), so
they are not pytest's ``tmp_path``; without this each run left about 90 MB per API server.

    root = directory("kube")        # /tmp/gpuprov-kube-test-XXXXXXXX, gone at exit
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def directory(name: str) -> Path:
    """A new ``/tmp/gpuprov-NAME-test-*`` directory, removed (with what is in it) at exit."""
    path = Path(tempfile.mkdtemp(prefix=f"gpuprov-{name}-test-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
