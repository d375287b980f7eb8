"""A real consumer of gpuprov's objects (Kueue, Volcano, system-upgrade-controller, kwok) run on
the controller machine against an API server: its processes, the objects it needs and how it
is torn down.

Everything lives in one work directory: one ``<name>.pid`` and ``<name>.log`` per process and
``cleanup.json``, the cluster-scoped objects to delete when it stops (its webhook
configurations: left behind with ``failurePolicy: Fail``, they would make the API server refuse
every object they match once nothing answers). ``stop(directory)`` needs nothing else, so
``lab down`` can end a consumer that an earlier command started.

>>> import tempfile
>>> handle = Consumer("demo", Path(tempfile.mkdtemp()), Path("/nonexistent.kubeconfig"))
>>> handle.start_process("sleeper", ["sleep", "30"])
>>> handle.running()
True
>>> handle.stop()
>>> handle.running()
False
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from gpuprov_lab import kubebuild, plugin_service, procs
from gpuprov_lab.errors import LabError

CLEANUP = "cleanup.json"


class Consumer:
    """The processes of one consumer, started in ``directory``, talking to ``kubeconfig``."""

    def __init__(self, name: str, directory: Path, kubeconfig: Path):
        self.name = name
        self.dir = directory
        self.kubeconfig = kubeconfig
        self.endpoints: list[tuple[str, int]] = []  # (address, port) its processes serve on
        self.dir.mkdir(parents=True, exist_ok=True)

    def start_process(self, process: str, argv: list[str], env: dict[str, str] | None = None):
        """Start ``argv`` as ``process`` (pid file and log in the work directory)."""
        procs.start(argv, self.pidfile(process), log=self.log(process), env=env)

    def pidfile(self, process: str) -> Path:
        return self.dir / f"{process}.pid"

    def log(self, process: str) -> Path:
        return self.dir / f"{process}.log"

    def processes(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("*.pid"))

    def running(self) -> bool:
        """Every process started is alive."""
        names = self.processes()
        return bool(names) and all(procs.alive(self.pidfile(n)) for n in names)

    def rss_kib(self) -> dict[str, int]:
        """Resident memory of each running process (``VmRSS`` of /proc/PID/status), in KiB."""
        out = {}
        for name in self.processes():
            pid = procs.read(self.pidfile(name))
            if pid is not None:
                out[name] = _vm_rss(pid)
        return out

    def delete_on_stop(self, kind: str, name: str) -> None:
        """Record a cluster-scoped object that ``stop`` deletes before ending the processes."""
        path = self.dir / CLEANUP
        state = json.loads(path.read_text()) if path.exists() else {"objects": []}
        state["kubeconfig"] = str(self.kubeconfig)
        if [kind, name] not in state["objects"]:
            state["objects"].append([kind, name])
        path.write_text(json.dumps(state, indent=2) + "\n")

    def wait(self, what: str, ready: Callable[[], bool], timeout: float, process: str) -> None:
        """Poll ``ready`` until true; LabError with the tail of ``process``'s log otherwise
        (also at once when ``process`` ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if not procs.alive(self.pidfile(process)):
                raise LabError(f"{self.name}: {process} ended before {what}:\n{self.tail(process)}")
            time.sleep(0.25)
        raise LabError(f"{self.name}: no {what} after {timeout:.0f} s:\n{self.tail(process)}")

    def tail(self, process: str, lines: int = 15) -> str:
        try:
            text = self.log(process).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        stop(self.dir)


def stop(directory: Path, timeout: float = 10.0) -> None:
    """Delete the recorded objects, then end every process of the consumer in ``directory``.

    Fine when nothing runs. The objects go first so no webhook is left that nothing answers;
    an API server that is already down is not waited for.
    """
    cleanup = directory / CLEANUP
    if cleanup.exists():
        state = json.loads(cleanup.read_text())
        for kind, name in state["objects"]:
            kubectl(
                Path(state["kubeconfig"]),
                "delete",
                kind,
                name,
                "--ignore-not-found",
                "--wait=false",
                "--request-timeout=5s",
                check=False,
                timeout=15,
            )
        cleanup.unlink()
    for pidfile in sorted(directory.glob("*.pid")):
        procs.stop(pidfile, timeout=timeout)


def kubectl(
    kubeconfig: Path, *args: str, check: bool = True, timeout: float = 120.0
) -> subprocess.CompletedProcess:
    """The lab's kubectl (the API server's own version) with ``kubeconfig``; LabError with its
    words when it fails and ``check``."""
    built = kubebuild.binaries()["kubectl"]
    program = str(built) if built.is_file() else "kubectl"
    try:
        result = subprocess.run(
            [program, f"--kubeconfig={kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        if not check:
            return subprocess.CompletedProcess(args, 1, "", str(e))
        raise LabError(f"kubectl {' '.join(args)}: {e}") from None
    if check and result.returncode != 0:
        raise LabError(f"kubectl {' '.join(args[:3])}: {result.stderr.strip()}")
    return result


def apply(kubeconfig: Path, documents: list[dict], field_manager: str = "gpuprov-lab") -> None:
    """Server-side apply of ``documents`` (a CRD as large as Kueue's Workload, 1.4 MB, does not
    fit the annotation of a client-side apply)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": documents}, f)
        f.flush()
        kubectl(
            kubeconfig,
            "apply",
            "--server-side",
            f"--field-manager={field_manager}",
            "--force-conflicts",
            "-f",
            f.name,
        )


def wait_established(kubeconfig: Path, crd_names: list[str], timeout: float = 60.0) -> None:
    """Wait until the API server serves every CRD named (condition ``Established``).

    ``kubectl wait`` gives up at once on a CRD whose status has no conditions yet (".status.
    conditions accessor error: <nil>", seen on a loaded machine right after the apply): it is
    asked again until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = max(1.0, deadline - time.monotonic())
        result = kubectl(
            kubeconfig,
            "wait",
            "--for=condition=Established",
            f"--timeout={left:.0f}s",
            *(f"crd/{n}" for n in crd_names),
            check=False,
            timeout=left + 30,
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise LabError(f"kubectl wait --for=condition=Established: {result.stderr.strip()}")
        time.sleep(0.5)


def shared_reference() -> Path:
    """The project's shared reference copies of upstream files (CRDs, install manifests), beside
    ``shared/bin`` (``GPUPROV_SHARED_BIN`` moves both)."""
    return plugin_service.shared_bin().parent / "reference"


def checked_crds(files: dict[str, bytes]) -> list[dict]:
    """The CRD documents of ``files`` (``<release>/<file name>`` -> content), each checked
    against the sha256 that the shared ``crds/SHA256SUMS`` lists for that name.

    Raises LabError naming the file when a sum differs or is missing: a CRD that is not the
    release's own would test gpuprov's objects against the wrong schema.
    """
    sums_file = shared_reference() / "crds" / "SHA256SUMS"
    try:
        listed = dict(
            reversed(line.split(None, 1)) for line in sums_file.read_text().splitlines() if line
        )
    except OSError as e:
        raise LabError(f"cannot read {sums_file}: {e}") from None
    documents = []
    for name, content in sorted(files.items()):
        got = hashlib.sha256(content).hexdigest()
        if listed.get(name) != got:
            raise LabError(f"{name}: sha256 {got}, {sums_file} lists {listed.get(name)}")
        documents.append(yaml.safe_load(content))
    return documents


def reference_crds(release: str) -> list[dict]:
    """The CRDs of ``release`` (e.g. ``volcano-v1.15.1``) from the shared copies, checked."""
    directory = shared_reference() / "crds" / release
    files = {f"{release}/{p.name}": p.read_bytes() for p in sorted(directory.glob("*.yaml"))}
    if not files:
        raise LabError(f"no CRDs in {directory}")
    return checked_crds(files)


def get_json(kubeconfig: Path, *what: str) -> dict | None:
    """The object as JSON, or None when it cannot be read."""
    result = kubectl(kubeconfig, "get", *what, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def free_ports(address: str, count: int = 1) -> list[int]:
    """``count`` different TCP ports nothing listens on at ``address`` now."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind((address, 0))  # all bound at once: never the same port twice
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def listening(address: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``address:port``."""
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((address, port)) == 0


def _vm_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
