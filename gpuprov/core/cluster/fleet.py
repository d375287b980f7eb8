"""The in-cluster deploy (``gpuprov kube render --fleet``): one Rancher system-upgrade-controller
``Plan`` per pool, whose Job runs gpuprov's own per-node deploy on each node of the pool, with
the node's plan handed over as data.

What a pool gets (docs/fleet.md):

- a ConfigMap ``gpuprov-fleet-<pool>`` holding one plan document per node (key
  ``<node>.json``, the ``gpuprov.plan/v1`` document of that one host, which
  ``gpuprov.core.plan_document`` reads back on the node);
- a Plan ``gpuprov-<pool>`` (``upgrade.cattle.io/v1``): ``nodeSelector`` = the labels gpuprov
  gives every node of the pool and no node of another pool, and the pool's node names
  (``kubernetes.io/hostname In [...]``), so that the nodes a Plan selects change with its
  version in one write and never with a node's labels alone, ``concurrency`` =
  ``fleet_concurrency``, ``cordon: true`` and no ``drain`` (gpuprov's deploy drains itself,
  through the API, only when its change disturbs pods), tolerations for the pool's own taints,
  and ``version`` = a hash of the pool's plan documents. The controller's ``latestHash`` is a
  hash of ``version`` (and the service account; ``pkg/upgrade/plan/plan.go:51-95`` at v0.20.1),
  so a changed pool plan re-runs that pool's nodes and an unchanged one runs nothing.

Plus the namespace, the controller's RBAC (the rules of the controller's own
``manifests/clusterrole.yaml`` at v0.20.1) and the Job's: read its pool's ConfigMap, get and
patch its Node (cordon, the result annotations), and what a drain needs.

>>> plan_name("whole_card"), config_map_name("whole_card")
('gpuprov-whole-card', 'gpuprov-fleet-whole-card')
>>> version_of({"n1": {"name": "h1"}}) == version_of({"n1": {"name": "h1"}})
True
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from gpuprov.core.cluster.pools import node_name, pool_labels, pool_taints
from gpuprov.core.errors import InputError, Problem
from gpuprov.core.kube_names import LABEL_MAX
from gpuprov.core.plan import ClusterPlan, HostPlan
from gpuprov.host.contract import FLEET_NAMESPACE, FLEET_PLAN_ANNOTATION, MODES

PLAN_API = "upgrade.cattle.io/v1"
PLAN_RESOURCE = "plans.upgrade.cattle.io"
CONTROLLER_ACCOUNT = "system-upgrade-controller"
JOB_ACCOUNT = "gpuprov-fleet"
HOST_ROOT = "/host"  # where the controller mounts the node's root in every container (job.go)
# The label SUC knows a node by (a Plan's candidates must carry it, its ``status.applying`` lists
# its values: pkg/upgrade/plan/plan.go NodeSelector, SelectConcurrentNodes at v0.20.1). The
# kubelet sets it to the name it registers its Node under (kubernetes v1.34.4
# cmd/kubelet/app/server.go:1213-1217, ``nodeName := types.NodeName(hostname)``, and
# pkg/kubelet/kubelet_node_status.go:307).
HOSTNAME_LABEL = "kubernetes.io/hostname"
# A ConfigMap holds at most 1 MiB (the API server's limit on an object in etcd).
CONFIG_MAP_MAX = 1024 * 1024
# Keys naming a file on the controller that the deploy reads (the rest of a plan is data): the
# Job gets each file in the ConfigMap too, and puts it back at its path before the deploy.
LOCAL_FILE_KEYS = ("driver_repo_key", "container_toolkit_repo_key")
FILES_KEY = "files.json"  # ConfigMap key: path -> the binaryData key holding the file
# The command the Job's container runs: gpuprov's own CLI in the image (docs/fleet.md).
COMMAND = ["gpuprov", "fleet", "apply"]


@dataclass(frozen=True)
class Pool:
    """One pool (the hosts of one mode group) as the fleet deploy sees it."""

    mode: str
    hosts: tuple[HostPlan, ...]
    selector: dict[str, str]
    concurrency: int
    documents: dict[str, dict[str, Any]]  # node name -> that host's plan document

    @property
    def version(self) -> str:
        # The hosts' plans only: where the inventory file lies is no change of plan.
        return version_of({node: doc["hosts"] for node, doc in self.documents.items()})


def plan_name(mode: str) -> str:
    """The Plan of ``mode``'s pool (an RFC 1123 name: ``whole_card`` -> ``whole-card``)."""
    return f"gpuprov-{mode.replace('_', '-')}"


def config_map_name(mode: str) -> str:
    return f"gpuprov-fleet-{mode.replace('_', '-')}"


def version_of(plans: dict[str, Any]) -> str:
    """The pool's plan version: a hash of its nodes' host plans (node name -> the plan as its
    document holds it), in node order: the same plan gives the same version on every render."""
    text = json.dumps(plans, sort_keys=True, separators=(",", ":"))
    return "plan-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def node_document(cluster: ClusterPlan, host: HostPlan) -> dict[str, Any]:
    """The plan document of one host (``gpuprov.plan/v1``, the host alone)."""
    return ClusterPlan(cluster.inventory, (host,), ()).as_dict()


def pools(cluster: ClusterPlan) -> list[Pool]:
    """The cluster's pools, in mode order; InputError when a pool's hosts disagree on
    ``fleet_concurrency`` or its labels cannot tell its nodes from another pool's."""
    by_mode: dict[str, list[HostPlan]] = {}
    for host in cluster.hosts:
        by_mode.setdefault(host.mode, []).append(host)
    problems = []
    out = []
    for mode, hosts in sorted(by_mode.items()):
        shared = dict(pool_labels(hosts[0]))
        for host in hosts[1:]:
            labels = pool_labels(host)
            shared = {k: v for k, v in shared.items() if labels.get(k) == v}
        others = [h for h in cluster.hosts if h.mode != mode]
        clash = next(
            (h for h in others if all(pool_labels(h).get(k) == v for k, v in shared.items())),
            None,
        )
        if not shared or clash is not None:
            why = (
                f"the {mode} hosts share no label of kube_node_labels"
                if not shared
                else f"the labels every {mode} host gets ({_labels(shared)}) are host "
                f"{clash.name}'s too (a {clash.mode} host)"
            )
            problems.append(
                Problem(
                    cluster.inventory,
                    f"{why}: the pool's Plan cannot select its nodes",
                    host=hosts[0].name,
                    key="kube_node_labels",
                )
            )
        concurrency = {h.fleet.fleet_concurrency for h in hosts}
        if len(concurrency) > 1:
            problems.append(
                Problem(
                    cluster.inventory,
                    f"the {mode} pool is one Plan with one concurrency; its hosts say "
                    f"{', '.join(str(c) for c in sorted(concurrency))}",
                    host=hosts[0].name,
                    key="fleet_concurrency",
                )
            )
        for host in hosts:
            if len(node_name(host)) > LABEL_MAX:
                problems.append(
                    Problem(
                        cluster.inventory,
                        f"node name {node_name(host)} is longer than a label value "
                        f"({LABEL_MAX} characters): the pool's Plan selects its nodes by "
                        f"{HOSTNAME_LABEL}",
                        host=host.name,
                        key="kube_node_name",
                    )
                )
        documents = {node_name(h): node_document(cluster, h) for h in hosts}
        documents = dict(sorted(documents.items()))
        out.append(Pool(mode, tuple(hosts), shared, min(concurrency), documents))
    if problems:
        raise InputError(problems)
    return out


def local_files(cluster: ClusterPlan) -> list[str]:
    """The controller's files the hosts' deploys read (``LOCAL_FILE_KEYS``), each once."""
    paths = {h.document_settings().get(k) for h in cluster.hosts for k in LOCAL_FILE_KEYS}
    return sorted(p for p in paths if p)


def render(
    cluster: ClusterPlan,
    image: str,
    namespace: str = FLEET_NAMESPACE,
    files: dict[str, bytes] | None = None,
) -> list[dict]:
    """Every object of the fleet deploy, in the order they apply (the namespace first, the
    Plans last, once what their Jobs read is there). ``files``: the contents of
    ``local_files(cluster)``, read by the caller on the controller."""
    why = image_problem(image)
    if why:
        raise InputError([Problem("command line", why, key="--image")])
    found = pools(cluster)
    maps = [_config_map(p, namespace, files or {}) for p in found]
    too_big = [
        (p, size)
        for p, m in zip(found, maps, strict=True)
        if (size := len(json.dumps(m["data"]).encode())) > CONFIG_MAP_MAX
    ]
    if too_big:
        raise InputError(
            [
                Problem(
                    cluster.inventory,
                    f"the {p.mode} pool's plan documents are {size} bytes, over a ConfigMap's "
                    f"{CONFIG_MAP_MAX}: split the pool into groups with labels of their own",
                    host=p.hosts[0].name,
                )
                for p, size in too_big
            ]
        )
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        *_rbac(namespace, [config_map_name(p.mode) for p in found]),
        *maps,
        *(_plan(p, image, namespace) for p in found),
    ]


def left_over(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The Plans and ConfigMaps (resource, name) of the pools that ``objects``, a fleet render,
    no longer has: a pool whose last host went to another group. Its Plan would stay, selecting
    by names that may come back, with documents of a plan that is gone; each Plan comes before
    its ConfigMap (SUC deletes the Jobs of a deleted Plan, ``pkg/upgrade/handle_batch.go``).

    >>> plans = [{"kind": "Plan", "metadata": {"name": plan_name(m)}} for m in ("shared", "mig")]
    >>> [name for _, name in left_over(plans)]
    ['gpuprov-whole-card', 'gpuprov-fleet-whole-card', 'gpuprov-vgpu', 'gpuprov-fleet-vgpu']
    """
    present = {o["metadata"]["name"] for o in objects if o.get("kind") == "Plan"}
    out = []
    for mode in MODES:
        if plan_name(mode) not in present:
            out += [(PLAN_RESOURCE, plan_name(mode)), ("configmaps", config_map_name(mode))]
    return out


def unselectable(name: str, node: dict[str, Any]) -> str | None:
    """Why no Plan can select the Node ``name`` (as the API server lists it), or None: its
    ``kubernetes.io/hostname`` is not its name (a label set by hand; the kubelet sets the two
    alike).

    >>> unselectable("gpu-1", {"metadata": {"labels": {HOSTNAME_LABEL: "gpu-1"}}}) is None
    True
    >>> unselectable("gpu-1", {"metadata": {"labels": {HOSTNAME_LABEL: "gpu-1.lan"}}})
    'its kubernetes.io/hostname is gpu-1.lan, not its name: the Plan of its pool selects nodes by that label and never selects it'
    """
    label = (node.get("metadata", {}).get("labels") or {}).get(HOSTNAME_LABEL)
    if label == name:
        return None
    have = f"is {label}" if label is not None else "is not set"
    return (
        f"its {HOSTNAME_LABEL} {have}, not its name: the Plan of its pool selects nodes by "
        "that label and never selects it"
    )


def image_problem(image: str) -> str | None:
    """Why ``image`` cannot be the Jobs' image, or None: it must be a reference with a tag or
    a digest (the controller tags a bare name with the plan version, container.go:46-62).

    >>> image_problem("registry.example/gpuprov-fleet"), image_problem("r.example/g:1")
    ('--image must name a tag or a digest (registry/repository:tag), got registry.example/gpuprov-fleet', None)
    """
    last = image.rsplit("/", 1)[-1]
    if not image or any(c.isspace() for c in image) or (":" not in last and "@" not in image):
        return f"--image must name a tag or a digest (registry/repository:tag), got {image}"
    return None


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _config_map(pool: Pool, namespace: str, files: dict[str, bytes]) -> dict[str, Any]:
    data = {
        f"{node}.json": json.dumps(doc, indent=1, sort_keys=True) + "\n"
        for node, doc in pool.documents.items()
    }
    wanted = sorted(
        {p for h in pool.hosts for k in LOCAL_FILE_KEYS if (p := h.document_settings().get(k))}
    )
    names = {path: "file-" + hashlib.sha256(path.encode()).hexdigest()[:16] for path in wanted}
    binary = {names[p]: base64.b64encode(files[p]).decode() for p in wanted}
    data[FILES_KEY] = json.dumps(names, sort_keys=True) + "\n"
    out = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(pool.mode),
            "namespace": namespace,
            "annotations": {FLEET_PLAN_ANNOTATION: pool.version},
        },
        "data": data,
    }
    return {**out, "binaryData": binary} if binary else out


def _plan(pool: Pool, image: str, namespace: str) -> dict[str, Any]:
    # The Job must land on a tainted pool: the controller adds only the unschedulable toleration.
    tolerations = [
        {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
        if t.value
        else {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in sorted(set(pool_taints(pool.hosts[0])))
    ]
    return {
        "apiVersion": PLAN_API,
        "kind": "Plan",
        "metadata": {"name": plan_name(pool.mode), "namespace": namespace},
        "spec": {
            "concurrency": pool.concurrency,
            "version": pool.version,
            # The node names as well as the labels: a node regrouped by `kube apply` keeps its
            # old pool's labels until its Node is patched, after the Plans; selected by labels
            # alone, it would get a Job of its old pool's new version, whose ConfigMap no longer
            # holds its document (seen in CI's lab: that Job failed and left the node cordoned).
            "nodeSelector": {
                "matchLabels": dict(sorted(pool.selector.items())),
                "matchExpressions": [
                    {"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(pool.documents)}
                ],
            },
            "serviceAccountName": JOB_ACCOUNT,
            "cordon": True,
            "tolerations": tolerations,
            "upgrade": {
                "image": image,
                "command": COMMAND,
                "args": ["--config-map", config_map_name(pool.mode), "--host-root", HOST_ROOT],
                "envs": [
                    {
                        "name": "GPUPROV_FLEET_NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    }
                ],
            },
        },
    }


def _rbac(namespace: str, config_maps: list[str]) -> list[dict[str, Any]]:
    """The service accounts, roles and bindings of the controller and of the Jobs."""

    def rule(groups, resources, verbs, names=None):
        out = {"apiGroups": groups, "resources": resources, "verbs": verbs}
        return {**out, "resourceNames": names} if names else out

    read = ["get", "list", "watch"]
    controller_cluster = [  # manifests/clusterrole.yaml (ClusterRole system-upgrade-controller)
        rule(["batch"], ["jobs"], read),
        rule(
            ["apiextensions.k8s.io"],
            ["customresourcedefinitions"],
            [*read, "create", "patch", "update"],
        ),
        rule([""], ["namespaces", "nodes"], read),
        rule([""], ["nodes"], ["update"]),
        rule([""], ["events"], ["get", "create", "patch", "update"]),
        rule(["coordination.k8s.io"], ["leases"], ["create"]),
        rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [CONTROLLER_ACCOUNT]),
        rule(
            ["upgrade.cattle.io"],
            ["plans", "plans/status"],
            [*read, "create", "patch", "update", "delete"],
        ),
    ]
    controller_namespaced = [  # the same file's Role system-upgrade-controller
        rule(
            ["batch"], ["jobs"], ["create", "delete", "deletecollection", "patch", "update", *read]
        ),
        rule([""], ["secrets"], read),
    ]
    job_cluster = [
        # cordon (the controller's kubectl init container) and the result annotations
        rule([""], ["nodes"], ["get", "patch"]),
        # gpuprov's own drain around a disruptive change: list the node's pods, evict them
        rule([""], ["pods"], ["get", "list"]),
        rule([""], ["pods/eviction"], ["create"]),
        # the budgets that refused an eviction (named in the failure), and `kubectl drain`'s
        # check of a DaemonSet pod's owner (drain_scope: node)
        rule(["policy"], ["poddisruptionbudgets"], ["get", "list"]),
        rule(["apps"], ["daemonsets"], ["get"]),
    ]
    job_namespaced = [rule([""], ["configmaps"], ["get"], config_maps)]
    out: list[dict[str, Any]] = []
    for account in (CONTROLLER_ACCOUNT, JOB_ACCOUNT):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": namespace},
            }
        )
    for account, cluster_rules, rules in (
        (CONTROLLER_ACCOUNT, controller_cluster, controller_namespaced),
        (JOB_ACCOUNT, job_cluster, job_namespaced),
    ):
        subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
        ref = {"apiGroup": "rbac.authorization.k8s.io", "name": account}
        out += [
            _rbac_object("ClusterRole", account, None, rules=cluster_rules),
            _rbac_object(
                "ClusterRoleBinding",
                account,
                None,
                roleRef={**ref, "kind": "ClusterRole"},
                subjects=subject,
            ),
            _rbac_object("Role", account, namespace, rules=rules),
            _rbac_object(
                "RoleBinding", account, namespace, roleRef={**ref, "kind": "Role"}, subjects=subject
            ),
        ]
    return out


def _rbac_object(kind: str, name: str, namespace: str | None, **body: Any) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        **body,
    }
