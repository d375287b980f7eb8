"""Run the pyinfra or gpuprov CLI in this process and count what each host was asked to do.

    python bench/counted.py OUT.json pyinfra -y inventories/lab.py deploys/gpu_node.py
    python bench/counted.py OUT.json gpuprov verify inventories/lab.py

A connector reaches its host only through ``run_shell_command``, ``put_file`` and ``get_file``,
so wrapping those three counts (and times) every remote round trip, facts included, whichever part of pyinfra
or gpuprov asks. OUT.json gets, per host, the commands in order, the uploads and downloads, and
for a deploy the operations pyinfra scheduled and how many of them changed something. The CLI's
exit code is passed through.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from collections import defaultdict
from typing import Any

from pyinfra.connectors.fake import FakeConnector
from pyinfra.connectors.local import LocalConnector
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.context import ctx_state

# The lab's connector, @local and @fake (handy to try the counting without a lab).
CONNECTORS = (SSHConnector, LocalConnector, FakeConnector)

_calls: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(
    lambda: {"commands": [], "uploads": [], "downloads": []}
)


def _count(cls: type, method: str, kind: str) -> None:
    original = getattr(cls, method)

    def wrapper(self, first: Any, *args: Any, **kwargs: Any) -> Any:
        # run_shell_command(command, ...), put_file(src, remote, ...), get_file(remote, dst, ...)
        if kind == "commands":
            what = first.get_raw_value() if hasattr(first, "get_raw_value") else first
        else:
            what = args[0] if kind == "uploads" else first
        start = time.perf_counter()
        try:
            return original(self, first, *args, **kwargs)
        finally:
            # Wall time of the round trip, the host's own work included.
            seconds = round(time.perf_counter() - start, 4)
            _calls[self.host.name][kind].append({"seconds": seconds, "what": str(what)})

    setattr(cls, method, wrapper)


def _operations() -> dict[str, dict[str, int]]:
    """Per host: operations pyinfra scheduled and how many changed something (deploys only;
    a host that failed leaves the rest of its operations unexecuted, counted as unchanged)."""
    state = ctx_state.get()
    if state is None:
        return {}
    return {
        host.name: {
            "operations": len(state.ops.get(host, {})),
            "changed": sum(
                1
                for op in state.ops.get(host, {}).values()
                if op.operation_meta.is_complete() and op.operation_meta.did_change()
            ),
        }
        for host in state.inventory
    }


def _write(path: str) -> None:
    hosts: dict[str, dict[str, Any]] = {name: dict(calls) for name, calls in _calls.items()}
    for name, ops in _operations().items():
        hosts.setdefault(name, {"commands": [], "uploads": [], "downloads": []}).update(ops)
    with open(path, "w") as out:
        json.dump({"hosts": dict(sorted(hosts.items()))}, out, indent=2)
        out.write("\n")


def main() -> None:
    out, program, *argv = sys.argv[1:]
    for cls in CONNECTORS:
        _count(cls, "run_shell_command", "commands")
        _count(cls, "put_file", "uploads")
        _count(cls, "get_file", "downloads")
    atexit.register(_write, out)
    sys.argv = [program, *argv]  # gpuprov's deploy reads pyinfra's command line from sys.argv
    if program == "pyinfra":
        from pyinfra_cli.main import main as cli
    elif program == "gpuprov":
        from gpuprov.cli import main as cli
    else:
        raise SystemExit(f"counted.py runs pyinfra or gpuprov, not {program!r}")
    sys.exit(cli())


if __name__ == "__main__":
    main()
