"""``gpuprov verify --kubeconfig``: what the cluster shows of every planned host, read with ONE
``kubectl get nodes -o json`` and compared by gpuprov.kube.verify.

The kubeconfig is checked when the check is set up, before any host is contacted, so a bad
one is exit 2 with nothing touched; an unreachable API server is a finding per host.

>>> check = ClusterCheck("~/.kube/config", cluster)   # doctest: +SKIP
>>> check.add_to(results)                               # doctest: +SKIP
"""

from __future__ import annotations

from gpuprov.findings import Finding
from gpuprov.kube import manifests
from gpuprov.kube.kubectl import Kubectl, KubectlError
from gpuprov.kube.verify import api_unreachable, compare_nodes
from gpuprov.plan import ClusterPlan


class ClusterCheck:
    """The cluster side of verify for ``cluster``'s hosts, through ``kubeconfig``."""

    def __init__(self, kubeconfig: str, cluster: ClusterPlan):
        self.client = Kubectl(kubeconfig)
        self.client.check_kubeconfig()  # InputError: exit 2
        self.plans = cluster.hosts
        # The labels and taints exactly as `gpuprov kube render` plans them (the namespace only
        # places the ConfigMaps, which verify does not read).
        self.wanted = manifests.render(cluster, manifests.DEFAULT_NAMESPACE).nodes

    def findings(self) -> dict[str, list[Finding]]:
        try:
            nodes = self.client.nodes()
        except KubectlError as e:
            return api_unreachable(self.plans, str(e))
        return compare_nodes(self.plans, self.wanted, nodes)

    def add_to(self, results: dict[str, list[Finding]]) -> None:
        """Append each host's cluster findings to its findings in ``results``."""
        for host, found in self.findings().items():
            results.setdefault(host, []).extend(found)
