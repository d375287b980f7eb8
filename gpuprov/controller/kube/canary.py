"""``gpuprov verify --canary``'s cluster edge: create the canary pods, wait for them, delete them.

The pods are those of ``gpuprov.core.cluster.canary_pods`` (one per node and planned resource),
created in their own namespace through ``kubectl`` (the client of ``verify --kubeconfig`` and
``kube apply``). Each has its host's ``canary_timeout`` to be scheduled and to start; the wait
ends early once every pod runs or has ended. The pods are deleted on the way out of the
``with`` block whatever happened (a finding, an exception, Ctrl-C or SIGTERM), and the delete
waits until the kubelets confirm it. The namespace stays (empty): deleting it would make the
next run wait for it to finish terminating.

>>> with CanaryRun(kubeconfig, cluster) as run:             # doctest: +SKIP
...     outcomes = run.wait()
...     documents = probe_every_host()
>>> run.findings(outcomes, documents)                        # doctest: +SKIP
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from gpuprov.controller.kube.kubectl import Kubectl, KubectlError
from gpuprov.core.checks import canary as canary_check
from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.cluster import canary_pods, manifests
from gpuprov.core.findings import Finding
from gpuprov.core.plan import ClusterPlan
from gpuprov.host.contract import CANARY_LABEL, CANARY_NAMESPACE

POLL_S = 2  # seconds between two looks at the pods
DELETE_TIMEOUT_S = 120  # the kubelets confirm a deletion in seconds; a dead node never does


class CanaryRun:
    """The canaries of ``cluster``'s hosts, through ``kubeconfig``."""

    def __init__(self, kubeconfig: str, cluster: ClusterPlan, client: Kubectl | None = None):
        self.client = client or Kubectl(kubeconfig)
        self.client.check_kubeconfig()  # InputError: exit 2, nothing created
        self.plans = {p.name: p for p in cluster.hosts}
        self.nodes = {
            n.host: n for n in manifests.render(cluster, manifests.DEFAULT_NAMESPACE).nodes
        }
        self.canaries = canary_pods.canaries(cluster.hosts, list(self.nodes.values()))
        # The run's id labels its pods, so a run deletes its own and no one else's.
        self.run_id = f"{time.strftime('%Y%m%dt%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
        self.error: str | None = None  # why the canaries could not be created
        self._old_sigterm: Any = None

    def __enter__(self) -> CanaryRun:
        self._old_sigterm = signal.signal(signal.SIGTERM, _interrupt)
        try:
            self._create()
        except KubectlError as e:
            self.error = str(e)
        except BaseException:
            # Ctrl-C or SIGTERM while the pods were being created: ``with`` never calls
            # __exit__ for an __enter__ that raised, and the API server may hold some already.
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        finally:
            signal.signal(signal.SIGTERM, self._old_sigterm)

    def _create(self) -> None:
        self.client.apply(json.dumps(canary_pods.namespace()))
        deadline = time.monotonic() + 30  # the controller manager makes the default account
        while self.client.run(
            "-n", CANARY_NAMESPACE, "get", "serviceaccount", "default"
        ).returncode:
            if time.monotonic() > deadline:
                raise KubectlError(
                    f"namespace {CANARY_NAMESPACE} has no default service account after 30 s "
                    "(is the controller manager running?)"
                )
            time.sleep(1)
        pods = [
            canary_pods.pod(
                c,
                self.plans[c.host],
                self.nodes[c.host],
                self.run_id,
                self.plans[c.host].canary.canary_image,
                self.plans[c.host].canary.canary_command,
            )
            for c in self.canaries
        ]
        if pods:
            listed = {"apiVersion": "v1", "kind": "List", "items": pods}
            self.client.create(json.dumps(listed))
        print(
            f"verify: {len(pods)} canary pod(s) in namespace {CANARY_NAMESPACE} "
            f"({CANARY_LABEL}={self.run_id})",
            file=sys.stderr,
            flush=True,
        )

    def wait(self) -> dict[str, canary_check.Outcome]:
        """Each canary's outcome (by pod name) once it runs or ended, or at its host's
        ``canary_timeout``."""
        if self.error is not None:
            return {}
        started = time.monotonic()
        limits = {c.name: self.plans[c.host].canary.canary_timeout for c in self.canaries}
        outcomes: dict[str, canary_check.Outcome] = {}
        while True:
            pods = self._pods()
            events = self._events()
            waiting = False
            for c in self.canaries:
                pod = pods.get(c.name) if pods is not None else None
                uid = (pod or {}).get("metadata", {}).get("uid")
                # Events of an earlier run's pod of the same name have another uid.
                mine = [e for e in events.get(c.name, ()) if e["involvedObject"].get("uid") == uid]
                outcome = canary_check.outcome(pod, mine)
                outcomes[c.name] = outcome
                final = outcome.state == canary_check.RUNNING or (pods is not None and _ended(pod))
                if not final and time.monotonic() - started < limits[c.name]:
                    waiting = True
            if not waiting:
                return outcomes
            time.sleep(POLL_S)

    def findings(
        self,
        outcomes: Mapping[str, canary_check.Outcome],
        probes: Mapping[str, ProbeDocument | None],
    ) -> dict[str, list[Finding]]:
        """Each host's canary findings, from the outcomes and the probe documents read while
        the canaries ran."""
        results: dict[str, list[Finding]] = {host: [] for host in self.plans}
        for c in self.canaries:
            plan = self.plans[c.host]
            if self.error is not None:
                results[c.host].append(
                    Finding(
                        c.host,
                        None,
                        canary_check.PENDING,
                        f"a pod asking for one {c.resource} created",
                        self.error,
                        "check the kubeconfig's permission to create pods and namespaces",
                    )
                )
                continue
            outcome = outcomes.get(c.name) or canary_check.outcome(None)
            results[c.host] += canary_check.check(
                c, outcome, plan, probes.get(c.host), plan.canary.canary_timeout
            )
        return results

    def delete(self) -> None:
        """Delete this run's pods and wait until they are gone; say so on stderr if not."""
        try:
            result = self.client.run(
                "-n", CANARY_NAMESPACE, "delete", "pods", "-l", f"{CANARY_LABEL}={self.run_id}",
                "--ignore-not-found", "--wait=true", f"--timeout={DELETE_TIMEOUT_S}s",
            )  # fmt: skip
            why = result.stderr.strip()[-300:] if result.returncode else None
        except KubectlError as e:
            why = str(e)
        if why is not None:
            print(
                f"verify: could not delete the canary pods ({why}); delete them with "
                f"`kubectl -n {CANARY_NAMESPACE} delete pods -l {CANARY_LABEL}={self.run_id}`",
                file=sys.stderr,
                flush=True,
            )

    def _pods(self) -> dict[str, dict[str, Any]] | None:
        """This run's pods by name; None when the API server did not answer."""
        try:
            result = self.client.run(
                "-n", CANARY_NAMESPACE, "get", "pods", "-l", f"{CANARY_LABEL}={self.run_id}",
                "-o", "json",
            )  # fmt: skip
        except KubectlError:
            return None
        if result.returncode:
            return None
        items = json.loads(result.stdout).get("items") or []
        return {p["metadata"]["name"]: p for p in items}

    def _events(self) -> dict[str, list[dict[str, Any]]]:
        """The namespace's events by the name of the object they are about."""
        try:
            result = self.client.run("-n", CANARY_NAMESPACE, "get", "events", "-o", "json")
        except KubectlError:
            return {}
        if result.returncode:
            return {}
        by_pod: dict[str, list[dict[str, Any]]] = {}
        for event in json.loads(result.stdout).get("items") or []:
            about = event.get("involvedObject") or {}
            event["involvedObject"] = about
            by_pod.setdefault(about.get("name", ""), []).append(event)
        return by_pod


def _ended(pod: Mapping[str, Any] | None) -> bool:
    """A pod that will not start any more: gone, or in phase Failed or Succeeded."""
    return pod is None or (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C, so the canaries are deleted on the way out."""
    raise KeyboardInterrupt
