"""``gpuprov verify --kubeconfig``: what the cluster shows of every planned host, read with one
paged node list (``Kubectl.nodes``: 500 nodes per list call, only the fields compared kept)
and compared node by node by gpuprov.core.cluster.compare.

The kubeconfig is checked when the check is set up, before any host is contacted, so a bad
one is exit 2 with nothing touched; an unreachable API server is a finding per host.

>>> check = ClusterCheck("~/.kube/config", cluster)   # doctest: +SKIP
>>> check.add_to(results)                               # doctest: +SKIP
"""

from __future__ import annotations

import sys

from gpuprov.controller.kube.kubectl import Kubectl, KubectlError
from gpuprov.core.checks import plugin_health
from gpuprov.core.cluster import health_cordon, manifests, queue_capacity
from gpuprov.core.cluster.compare import api_unreachable, compare_nodes
from gpuprov.core.cluster.kueue import QUEUE_OWNER, QUEUE_OWNER_LABEL
from gpuprov.core.findings import Finding
from gpuprov.core.plan import ClusterPlan


class ClusterCheck:
    """The cluster side of verify for ``cluster``'s hosts, through ``kubeconfig``."""

    def __init__(self, kubeconfig: str, cluster: ClusterPlan):
        self.client = Kubectl(kubeconfig)
        self.client.check_kubeconfig()  # InputError: exit 2
        self.plans = cluster.hosts
        # The labels and taints exactly as `gpuprov kube render` plans them (the namespace only
        # places the ConfigMaps, which verify does not read).
        self.wanted = manifests.render(cluster, manifests.DEFAULT_NAMESPACE).nodes
        self.nodes: dict[str, dict] | None = None  # the last node list read

    def node_names(self) -> dict[str, str]:
        """Host -> its node's name, for the hosts whose node is named otherwise."""
        return {w.host: w.name for w in self.wanted if w.name != w.host}

    def findings(self, health: dict[str, set[int]] | None = None) -> dict[str, list[Finding]]:
        """Each host's cluster findings; ``health``: host -> the GPUs gpuprov finds unhealthy,
        compared with what the device plugin marked unhealthy (``plugin_health``)."""
        try:
            self.nodes = self.client.nodes()
        except KubectlError as e:
            self.nodes = None
            return api_unreachable(self.plans, str(e))
        return compare_nodes(self.plans, self.wanted, self.nodes, health)

    def queue_findings(self, nodes: dict[str, dict]) -> dict[str, list[Finding]]:
        """``queue NAME`` -> findings for gpuprov's live Kueue and Volcano queues whose quota
        is above the live capacity of ``nodes`` (gpuprov.core.cluster.queue_capacity); none
        where the scheduler's CRDs are not installed."""
        owned = f"{QUEUE_OWNER_LABEL}={QUEUE_OWNER}"
        out: dict[str, list[Finding]] = {}
        try:
            queues = self.client.labelled("clusterqueues.kueue.x-k8s.io", owned)
            if queues:
                flavors = self.client.labelled("resourceflavors.kueue.x-k8s.io", owned) or []
                out.update(queue_capacity.kueue_findings(queues, flavors, nodes))
            volcano = self.client.labelled("queues.scheduling.volcano.sh", owned)
            for name, found in queue_capacity.volcano_findings(volcano or [], nodes).items():
                out.setdefault(name, []).extend(found)
        except KubectlError as e:
            # The nodes were listed: this is a kubeconfig without the queues' permissions
            # (docs/kubernetes.md lists the RBAC verify needs), not a drift of the cluster.
            print(f"verify: queues not checked: {e}", file=sys.stderr, flush=True)
        return out

    def add_to(
        self,
        results: dict[str, list[Finding]],
        cordon_unhealthy: bool = False,
        health_read: bool = False,
    ) -> None:
        """Append each host's cluster findings to its findings in ``results``, then say which
        nodes should be cordoned for an unhealthy GPU (``health_cordon``); with
        ``cordon_unhealthy``, cordon them and say so on stderr. Never uncordons.
        ``health_read``: ``results`` hold the hosts' GPU health, which the device plugin's view
        (the Node's capacity − allocatable) is then compared with."""
        sick = health_cordon.unhealthy(results)
        views = {
            host: view
            for host, found in results.items()
            if health_read and (view := plugin_health.unhealthy_gpus(found)) is not None
        }
        for host, found in self.findings(views).items():
            if host in sick:
                # "uncordon it" is the wrong advice for a node whose GPU is unhealthy.
                found = [f for f in found if f.check != health_cordon.CHECK]
            results.setdefault(host, []).extend(found)
        if self.nodes is None:
            return
        results.update(self.queue_findings(self.nodes))
        by_host = {w.host: w for w in self.wanted}
        schedulable = health_cordon.to_cordon(sick, self.wanted, self.nodes)
        for host in sick:
            want = by_host.get(host)
            if want is None or want.name not in self.nodes:
                continue
            if want not in schedulable:
                results[host].append(health_cordon.kept(want))
            elif not cordon_unhealthy:
                results[host].append(health_cordon.hint(want))
            else:
                try:
                    self.client.cordon(want.name)
                except KubectlError as e:
                    results[host].append(
                        Finding(
                            host,
                            None,
                            "kube-api",
                            f"node {want.name} cordoned",
                            str(e),
                            "check the kubeconfig's permission to patch nodes",
                        )
                    )
                    continue
                print(
                    f"verify: cordoned node {want.name} (host {host}: unhealthy GPU)",
                    file=sys.stderr,
                    flush=True,
                )
                results[host].append(health_cordon.cordoned(want))
