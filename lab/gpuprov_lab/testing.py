"""The lab as pytest sees it: start it once, reach its hosts, take it down.

``tests/lab/conftest.py`` wraps this in the session fixture ``lab``; end-to-end tests elsewhere
can do the same. Hosts are addressed by name (``lab-h100-01``) through the run's ssh_config.

    lab = Lab.start()                       # `gpuprov lab up` (3 hosts), as root
    lab.run("lab-h100-01", "nvidia-smi -L").stdout
    lab.testinfra("lab-h100-01").service("kubelet").is_running
    lab.deploy()                            # pyinfra -y inventories/lab.py deploys/gpu_node.py
    lab.verify().returncode                 # gpuprov verify inventories/lab.py
    lab.verify(None, "--kubeconfig", str(lab.kubeconfig)).returncode
    lab.kubectl("get", "nodes").stdout      # the lab's kubectl, admin kubeconfig
    lab.stop()
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gpuprov.host.contract import (
    AGENT_PATH,
    CANARY_NAMESPACE,
    DEVICE_PLUGIN_UNIT,
    KUBELET_DEVICE_PLUGIN_DIR,
)
from gpuprov_lab import controlplane, kueue, lifecycle, network, ssh, volcano
from gpuprov_lab.rundir import RunDir, default_dir
from gpuprov_lab.sim.contract import SIM_KERNEL_LOG_NAME, SIM_STATE_PATH
from gpuprov_lab.spec import LabHost, default_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = "deploys/gpu_node.py"

TEST_OWNED = "started-by-tests"
# Namespaces that outlive a module by design: the queue systems' (`lab up --queues`) and
# verify's canary namespace (gpuprov.controller.kube.canary keeps it, empty).
KEPT_NAMESPACES = {
    kueue.NAMESPACE,
    volcano.NAMESPACE,
    CANARY_NAMESPACE,
}  # in the run directory of a lab that a test session started
Placement = tuple[int, int, int]  # (profile id, start, size) of a GPU instance


def planned_instances(host_plan: dict[str, Any]) -> dict[int, list[Placement]]:
    """GPU index -> the GPU instances a HostPlan document places on it, sorted."""
    return {
        g["index"]: sorted((i["profile_id"], i["start"], i["size"]) for i in g["instances"])
        for g in host_plan["gpus"]
    }


def observed_instances(probe: dict[str, Any]) -> dict[int, list[Placement]]:
    """GPU index -> the GPU instances a probe document shows on it, sorted."""
    return {
        g["index"]: sorted((i["profile_id"], i["start"], i["size"]) for i in g["gpu_instances"])
        for g in probe["gpus"]
    }


class UserLabUp(Exception):
    """A lab that a person started is up; the tests will not use or stop it."""


def _refuse_a_users_lab(run_dir: RunDir) -> None:
    if run_dir.read_state() is not None and not (run_dir.path / TEST_OWNED).exists():
        raise UserLabUp(
            f"a lab started outside the tests is up in {run_dir.path}; the lab tests need "
            "their own and leave yours alone: run `gpuprov lab down` to run them"
        )


@dataclass
class Lab:
    """A running lab: its hosts, run directory, inventory and SSH access."""

    run_dir: RunDir
    hosts: list[LabHost]
    _testinfra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def start(cls, hosts: int = 3, spec: list[LabHost] | None = None, kube: bool = True) -> Lab:
        """`gpuprov lab up --hosts N` (or of ``spec``; ``kube=False``: ``--no-kube``), reusing a
        lab that an earlier test session left.

        A lab that a person started (`gpuprov lab up` or `lab demo`) is theirs: the tests neither
        reuse it (it may be deployed already) nor take it down; ``UserLabUp`` says so instead.
        """
        spec = spec or default_spec(hosts)
        run_dir = RunDir(default_dir())
        _refuse_a_users_lab(run_dir)
        owner = run_dir.path / TEST_OWNED
        lifecycle.up(run_dir, spec, kube=kube)
        owner.touch()
        return cls(run_dir, spec)

    @staticmethod
    def make_way() -> None:
        """Take down the lab an earlier test started, for a test that starts a lab of its own;
        a lab a person started (its control plane included) stays, and ``UserLabUp`` says so."""
        run_dir = RunDir(default_dir())
        _refuse_a_users_lab(run_dir)
        lifecycle.down(run_dir)

    def stop(self) -> None:
        """`gpuprov lab down`; fine if it is already down."""
        self._close_testinfra()
        lifecycle.down(self.run_dir)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def host(self, name: str) -> LabHost:
        return next(h for h in self.hosts if h.name == name)

    def in_group(self, group: str) -> list[LabHost]:
        return [h for h in self.hosts if h.group == group]

    @property
    def ssh_config(self) -> Path:
        return self.run_dir.ssh_config

    @property
    def kube(self) -> dict[str, Any] | None:
        """The lab's cluster (server, kubeconfig, kubectl) as ``lab.json`` records it."""
        state = self.run_dir.read_state()
        return state.get("kube") if state else None

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (the lab runs Kubernetes, or this fails)."""
        assert self.kube, "this lab runs without Kubernetes (`lab up --no-kube`)"
        return Path(self.kube["kubeconfig"])

    def kubectl(
        self, *args: str, timeout: float = 60, input_text: str | None = None
    ) -> subprocess.CompletedProcess:
        """The lab's kubectl with the admin kubeconfig (not checked); ``input_text`` on stdin."""
        assert self.kube, "this lab runs without Kubernetes (`lab up --no-kube`)"
        return subprocess.run(
            [self.kube["kubectl"], f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input_text,
        )

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Node name -> ``{"ready", "allocatable"}`` as the API server shows it now."""
        assert self.kube, "this lab runs without Kubernetes (`lab up --no-kube`)"
        rows = controlplane.nodes(self.kube["kubectl"], self.kubeconfig)
        return {row["name"]: row for row in rows}

    def wait_nodes(
        self, predicate, timeout: float = 60, what: str = "the nodes"
    ) -> dict[str, dict[str, Any]]:
        """Poll ``nodes()`` until ``predicate(nodes)`` holds; fail with the last view after
        ``timeout`` seconds (the kubelet reports its status every 10 s)."""
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.nodes()
            if predicate(nodes):
                return nodes
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not so after {timeout:.0f} s; the API server shows {nodes}"
                )
            time.sleep(1)

    def namespaces(self) -> dict[str, str]:
        """Namespace name -> phase (``Active``, ``Terminating``), as the API server shows now."""
        result = self.kubectl("get", "namespaces", "-o", "json")
        assert result.returncode == 0, result.stderr
        return {
            n["metadata"]["name"]: n.get("status", {}).get("phase", "")
            for n in json.loads(result.stdout)["items"]
        }

    def clear_workloads(self, keep: set[str]) -> list[str]:
        """Leave the cluster as a module found it: every namespace not in ``keep`` deleted (but
        the queue systems' own, which `lab up` manages, and verify's canary namespace, which it
        keeps empty),
        the ``default`` namespace's pods and their controllers deleted, every node uncordoned.
        Returns what it found left behind (nothing, when the module cleaned up after itself).

            left = lab.clear_workloads(keep=namespaces_before)   # [] or ["namespace/team-a"]
        """
        left = [
            f"namespace/{name}"
            for name, phase in sorted(self.namespaces().items())
            if name not in keep | KEPT_NAMESPACES and phase == "Active"
        ]
        kinds = "deployments,replicasets,jobs,pods"
        found = self.kubectl("-n", "default", "get", kinds, "-o", "name")
        left += found.stdout.split()
        cordoned = self.kubectl(
            "get", "nodes", "--field-selector=spec.unschedulable=true", "-o", "name"
        )
        left += cordoned.stdout.split()
        if any(item.startswith("namespace/") for item in left):
            names = [item.split("/", 1)[1] for item in left if item.startswith("namespace/")]
            self.kubectl("delete", "namespace", *names, "--timeout=120s", timeout=150)
        if found.stdout.strip():
            self.kubectl("-n", "default", "delete", kinds, "--all", "--timeout=60s", timeout=90)
        if cordoned.stdout.strip():
            self.kubectl("uncordon", *cordoned.stdout.split())
        return left

    def pods_not_running(self, namespace: str) -> str:
        """One line per pod of ``namespace`` that is not running: its phase, its container's
        waiting or terminated reason, and the namespace's last event about it (for the message
        of a wait that timed out)."""
        pods = self.kubectl("-n", namespace, "get", "pods", "-o", "json")
        events = self.kubectl("-n", namespace, "get", "events", "-o", "json")
        if pods.returncode != 0:
            return pods.stderr.strip()
        last: dict[str, str] = {}
        for event in sorted(
            json.loads(events.stdout or '{"items": []}')["items"],
            key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "",
        ):
            last[event["involvedObject"].get("name", "")] = f"{event['reason']}: {event['message']}"
        lines = []
        for pod in json.loads(pods.stdout)["items"]:
            status = pod["status"]
            states = [s.get("state", {}) for s in status.get("containerStatuses") or []]
            if status.get("phase") == "Running" and states and all("running" in s for s in states):
                continue
            reasons = [v.get("reason", k) for s in states for k, v in s.items()]
            name = pod["metadata"]["name"]
            lines.append(
                f"{name}: {status.get('phase')} {','.join(reasons) or '-'}; {last.get(name, '')}"
            )
        return "\n".join(lines) or "every pod runs"

    @property
    def env(self) -> dict[str, str]:
        """The environment for gpuprov and pyinfra, the lab's kubectl first on PATH."""
        return controlplane.env_with_kubectl(self.kube and self.kube["kubectl"])

    @property
    def inventory(self) -> Path:
        return REPO_ROOT / "inventories" / "lab.py"

    @cached_property
    def bin(self) -> Path:
        """The directory of this Python's console scripts (pyinfra, gpuprov)."""
        return Path(sys.executable).parent

    def run(
        self, host: str, command: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run a shell ``command`` on ``host`` over SSH; with ``check``, fail on non-zero exit."""
        result = ssh.run(self.run_dir, host, command, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"{host}: `{command}` exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        return result

    def deploy_argv(self, inventory: Path | None = None, *args: str) -> list[str]:
        return [str(self.bin / "pyinfra"), "-y", str(inventory or self.inventory), DEPLOY, *args]

    def deploy(
        self, inventory: Path | None = None, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess:
        """``pyinfra -y INVENTORY deploys/gpu_node.py [ARGS]``; with ``check``, fail unless it
        exits 0."""
        result = subprocess.run(
            self.deploy_argv(inventory, *args),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            env=self.env,
        )
        if check and result.returncode != 0:
            # Enough of the output to hold a failed step's own lines (a restart's journal), which
            # pyinfra prints before its results table.
            raise AssertionError(
                f"deploy exited {result.returncode}:\n{result.stdout[-20000:]}{result.stderr[-3000:]}"
            )
        return result

    def verify(self, inventory: Path | None = None, *args: str) -> subprocess.CompletedProcess:
        """``gpuprov verify INVENTORY [ARGS]`` (not checked: the exit code is the answer)."""
        return self._gpuprov("verify", str(inventory or self.inventory), *args)

    def kube_apply(self, inventory: Path | None = None) -> None:
        """``gpuprov kube apply INVENTORY --kubeconfig K``: the node labels and taints and the
        device plugin ConfigMap that ``verify --kubeconfig`` checks besides the allocatable."""
        result = self._gpuprov(
            "kube", "apply", str(inventory or self.inventory), "--kubeconfig", str(self.kubeconfig)
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def kube_render(self, inventory: Path | None, out: Path) -> Path:
        """``gpuprov kube render INVENTORY --out OUT``: what the charts and ConfigMaps get."""
        result = self._gpuprov(
            "kube", "render", str(inventory or self.inventory), "--out", str(out)
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return out

    def verify_status(self, inventory: Path | None = None) -> dict[str, str]:
        """Host name -> ``ok``, ``drift`` or ``unreachable``, as ``gpuprov verify`` sees it."""
        document = json.loads(self.verify(inventory, "--format", "json").stdout)
        return {h["name"]: h["status"] for h in document["hosts"]}

    def plan(self, inventory: Path | None = None) -> dict[str, Any]:
        """Host name -> its HostPlan document (``gpuprov plan --format json``)."""
        result = self._gpuprov("plan", str(inventory or self.inventory), "--format", "json")
        assert result.returncode == 0, result.stdout + result.stderr
        return {h["name"]: h for h in json.loads(result.stdout)["hosts"]}

    def probe(self, host: str) -> dict[str, Any]:
        """The host agent's probe document (schema gpuprov.probe/v1)."""
        return json.loads(self.run(host, f"python3 {AGENT_PATH} probe").stdout)

    def inventory_copy(
        self, directory: Path, inventory_code: str = "", group_data_code: str = ""
    ) -> Path:
        """A copy of the lab inventory in ``directory``, with Python appended to it (regroup
        hosts) and to its group data (override settings); its group data applies as to the
        original, since the copy keeps the name ``lab.py``."""
        group_data = directory / "group_data"
        group_data.mkdir(parents=True, exist_ok=True)
        source = self.inventory.parent / "group_data" / "lab.py"
        shutil.copyfile(source, group_data / "lab.py")
        with (group_data / "lab.py").open("a") as f:
            f.write(group_data_code)
        copy = directory / "lab.py"
        copy.write_text(self.inventory.read_text() + inventory_code)
        return copy

    def wait_registered(self, host: str, timeout: float = 60) -> None:
        """Wait until ``host``'s kubelet has the devices the lab's plan gives it, with the
        deploy's own wait (``agent.pyz settle``): after a reboot the device plugin registers
        a few seconds after the host answers SSH."""
        wants = [f"--want={r}={n}" for r, n in self.plan()[host]["resources"].items()]
        self.run(
            host,
            shlex.join(
                ["python3", AGENT_PATH, "settle", f"--dir={KUBELET_DEVICE_PLUGIN_DIR}", *wants]
                + [f"--timeout={timeout}"]
            ),
            timeout=timeout + 30,
        )

    def forget_xids(self, host: str, timeout: float = 90) -> None:
        """Undo ``gpuprov-sim inject xid`` on ``host`` without a reboot (the MIG layout kept):
        the kernel log as after a boot, and the device plugin restarted, since the plugin keeps
        the devices it marked unhealthy so until it restarts. Returns once the node shows the
        planned allocatable again (a lab without Kubernetes: at once)."""
        kmsg = f"{SIM_STATE_PATH.rsplit('/', 1)[0]}/{SIM_KERNEL_LOG_NAME}"
        self.run(host, f": > {kmsg} && systemctl restart {DEVICE_PLUGIN_UNIT}")
        if not self.kube:
            return
        self.wait_planned_allocatable(
            timeout, f"{host}'s planned allocatable after its device plugin restarted", [host]
        )

    def wait_planned_allocatable(
        self,
        timeout: float = 60,
        what: str = "every planned GPU resource in allocatable",
        hosts: list[str] | None = None,
        ready: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """``wait_nodes`` until each of ``hosts`` (default: every planned host; with ``ready``,
        also Ready) has each planned resource in allocatable at its planned count."""
        plans = self.plan()
        planned = {h: plans[h]["resources"] for h in (hosts or plans)}
        return self.wait_nodes(
            lambda nodes: all(
                (not ready or nodes.get(h, {}).get("ready"))
                and all(
                    nodes.get(h, {}).get("allocatable", {}).get(r) == str(c)
                    for r, c in want.items()
                )
                for h, want in planned.items()
            ),
            timeout,
            what,
        )

    def reboot(self, host: str, timeout: float = 90) -> None:
        """``systemctl reboot`` on ``host``; return once it has booted again."""
        boot_id = self.run(host, "cat /proc/sys/kernel/random/boot_id").stdout
        self._close_testinfra(host)
        self.run(host, "systemctl reboot", check=False)
        deadline = time.monotonic() + timeout
        while self.run(host, "cat /proc/sys/kernel/random/boot_id", check=False).stdout in (
            boot_id,
            "",
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"{host} did not come back from the reboot in {timeout} s")
            time.sleep(0.5)
        ssh.wait_booted(self.run_dir, [host], timeout=max(1.0, deadline - time.monotonic()))

    def cut_ssh(self, host: str, seconds: float) -> None:
        """Lose ``host``'s SSH connections: its link goes down, the host forgets the
        connections, and the link comes back after ``seconds``; a peer's next packet on an old
        connection is answered with a reset (new connections work)."""
        index = self.host(host).index
        self._close_testinfra(host)
        network.set_link(index, up=False)
        try:
            network.drop_connections(index, port=22)
            time.sleep(seconds)
        finally:
            network.set_link(index, up=True)

    def _gpuprov(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / "gpuprov"), *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=self.env,
        )

    def testinfra(self, host: str) -> Any:
        """A testinfra host over ``paramiko://`` with the lab's ssh_config (cached per host, and
        connected again after a reboot or a cut: testinfra's own ``get_host`` cache is not used,
        since it would hand back the closed connection)."""
        if host not in self._testinfra:
            import testinfra.backend
            import testinfra.host

            backend = testinfra.backend.get_backend(
                f"paramiko://{host}", ssh_config=str(self.ssh_config)
            )
            # testinfra's paramiko backend reads no UserKnownHostsFile (it would warn about
            # every host key): it is handed a client that checks the lab's known_hosts.
            backend.client = self._paramiko_client(host)
            self._testinfra[host] = testinfra.host.Host(backend)
            backend.set_host(self._testinfra[host])
        return self._testinfra[host]

    def _paramiko_client(self, host: str) -> Any:
        """A paramiko connection to ``host`` as the lab's ssh_config says, refusing a host key
        that the lab's known_hosts does not list."""
        import paramiko

        config = paramiko.SSHConfig.from_path(str(self.ssh_config)).lookup(host)
        client = paramiko.SSHClient()
        client.load_host_keys(config["userknownhostsfile"])
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            config["hostname"],
            username=config["user"],
            key_filename=config["identityfile"][0],
            look_for_keys=False,
            allow_agent=False,
            timeout=float(config["connecttimeout"]),
        )
        return client

    def _close_testinfra(self, *hosts: str) -> None:
        """Close the cached testinfra connections of ``hosts`` (default: all)."""
        for name in hosts or list(self._testinfra):
            if name in self._testinfra:
                self._testinfra.pop(name).backend.client.close()
