"""A generated fleet for scale work: an inventory of N hosts of 8 GPUs in the three mode groups,
and the kwok Nodes that show exactly what its plan says, for bench/ and the fleet tests.

Hosts are spread over the groups in turn (``shared``: A100s time-sliced 4 ways; ``mig``: H100s
with a handful of layouts and per-host overrides, as a real fleet would; ``whole_card``:
H200s). A Node per planned host carries the labels and taints ``gpuprov kube render`` plans,
the annotations ``gpuprov kube apply`` sets, and ``status.allocatable`` as a kubelet reports
it once the device plugin registered: the planned resources and ``pods`` = maxPods.

>>> import tempfile
>>> path = write_inventory(Path(tempfile.mkdtemp()), 7)
>>> "gpu-00006" in path.read_text()
True
"""

from __future__ import annotations

from pathlib import Path

from gpuprov.core.cluster import manifests
from gpuprov.core.plan import ClusterPlan
from gpuprov_lab import consumer, kwok

LAYOUTS = [
    {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
    {"1g.10gb": 7},
    {"4g.40gb": 1, "3g.40gb": 1},
    {"3g.40gb": 2},
    {"2g.20gb": 3, "1g.10gb": 1},
]
# What a kubelet lists of each image it holds, up to its nodeStatusMaxImages (50 by default):
# most of a real Node's size, none of it read by verify.
_IMAGE = "registry.example.com/team/app-{0}"


def write_inventory(directory: Path, hosts: int) -> Path:
    """``directory/fleet.py``: ``hosts`` hosts named ``gpu-00000`` on."""
    shared, mig, whole = [], [], []
    for i in range(hosts):
        name = f"gpu-{i:05d}"
        if i % 3 == 0:
            shared.append(name)
        elif i % 3 == 1:
            override = {"mig_layout_by_gpu": {i % 8: LAYOUTS[i % len(LAYOUTS)]}}
            mig.append((name, override) if i % 7 == 1 else name)
        else:
            whole.append(name)
    text = (
        f"shared = ({shared!r}, {{'gpu_model': 'A100-80GB', 'gpu_count': 8, "
        f"'time_slicing_replicas': 4}})\n"
        f"mig = ({mig!r}, {{'gpu_model': 'H100-80GB', 'gpu_count': 8, "
        f"'mig_layout': {LAYOUTS[0]!r}}})\n"
        f"whole_card = ({whole!r}, {{'gpu_model': 'H200-141GB', 'gpu_count': 8}})\n"
    )
    path = directory / "fleet.py"
    path.write_text(text)
    return path


def nodes(cluster: ClusterPlan, images: int = 0) -> list[dict]:
    """A kwok Node per planned host, matching the plan; ``images`` entries of
    ``status.images`` each, to give the Nodes a kubelet's size (0: kwok's small Nodes)."""
    by_host = {h.name: h for h in cluster.hosts}
    out = []
    for i, want in enumerate(manifests.render(cluster, manifests.DEFAULT_NAMESPACE).nodes):
        plan = by_host[want.host]
        allocatable = {resource: str(n) for resource, n in plan.resources.items()}
        allocatable["pods"] = str(plan.kubelet.kubelet_max_pods)
        node = kwok.fake_node(
            want.name, want.labels, allocatable, [t.as_api() for t in want.taints], index=i
        )
        node["metadata"]["annotations"].update(want.annotations)
        if images:
            node["status"]["images"] = [
                {
                    "names": [
                        f"{_IMAGE.format(j)}@sha256:{j:064x}",
                        f"{_IMAGE.format(j)}:v1.{j}.0",
                    ],
                    "sizeBytes": 100_000_000 + j,
                }
                for j in range(images)
            ]
        out.append(node)
    return out


def create(kubeconfig: Path, fleet: list[dict], batch: int = 1000) -> None:
    """Create the Nodes of ``fleet``, ``batch`` per ``kubectl create`` (a List of 5,000 kubelet-
    sized Nodes is one 60 MB document for kubectl to hold)."""
    for start in range(0, len(fleet), batch):
        kwok.create_nodes(kubeconfig, fleet[start : start + batch])


def set_allocatable(kubeconfig: Path, names: list[str], resource: str, value: str) -> None:
    """``status.allocatable[resource] = value`` on each node of ``names``, through the status
    subresource as a kubelet writes it (one ``kubectl patch`` for all)."""
    patch = f'{{"status": {{"allocatable": {{"{resource}": "{value}"}}}}}}'
    consumer.kubectl(
        kubeconfig, "patch", "node", *names, "--subresource=status", "--type=merge", "-p", patch
    )


def remove_label(kubeconfig: Path, names: list[str], key: str) -> None:
    """Remove label ``key`` from each node of ``names`` (one ``kubectl label``)."""
    consumer.kubectl(kubeconfig, "label", "node", *names, f"{key}-")
