"""The lab's hosts as pyinfra inventory entries, for ``inventories/lab.py``.

The hosts come from the running lab's ``lab.json`` (so a lab started with ``--hosts 8`` or
``--spec`` is what the inventory names), or, with no lab up, the default three-host layout.
Each entry carries its address and its simulated GPUs as host data.

>>> hosts("mig", [])                                               # no lab.json: the default
[('lab-h100-01', {'ssh_hostname': '10.200.0.12', 'gpu_model': 'H100-80GB', 'gpu_count': 8})]
"""

from __future__ import annotations

from typing import Any

from gpuprov.core import catalog
from gpuprov_lab.rundir import RunDir, default_dir
from gpuprov_lab.spec import default_spec

# The model whose profile names inventories/lab.py's `mig_layout` uses; a MIG host of another
# model gets the same shape in its own profile names as host data.
MIG_LAYOUT_MODEL = "H100-80GB"


def hosts(
    group: str, lab_hosts: list[dict[str, Any]] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """``(name, host data)`` of every lab host in mode ``group``."""
    if lab_hosts is None:
        state = RunDir(default_dir()).read_state()
        lab_hosts = state["hosts"] if state else []
    if not lab_hosts:
        lab_hosts = [h.as_dict() for h in default_spec()]
    out = []
    for host in lab_hosts:
        if host["group"] != group:
            continue
        data: dict[str, Any] = {
            "ssh_hostname": host["ip"],
            "gpu_model": host["model"],
            "gpu_count": host["count"],
        }
        if group == "mig" and host["model"] != MIG_LAYOUT_MODEL:
            data["mig_layout"] = balanced_layout(host["model"])
        out.append((host["name"], data))
    return out


def balanced_layout(model: str) -> dict[str, int]:
    """mig-parted's "all-balanced" shape in ``model``'s profile names: 3g, 2g and two 1g.

    >>> balanced_layout("H200-141GB")
    {'3g.71gb': 1, '2g.35gb': 1, '1g.18gb': 2}
    """
    gpu = catalog.find_model(model)
    if gpu is None or not gpu.mig_capable:
        raise ValueError(f"{model} is not a MIG-capable catalog model")
    smallest = {}
    for profile in gpu.profiles:
        if "+" not in profile.name:
            smallest.setdefault(profile.compute_slices, profile.name)
    layout = {smallest[c]: 1 for c in (3, 2) if c in smallest}
    layout[smallest[1]] = 2
    return layout


def kubeconfig() -> str | None:
    """The running lab's admin kubeconfig, for the deploy's cordon and drain (group data
    ``kubeconfig``); None without a lab or with one started ``--no-kube``."""
    state = RunDir(default_dir()).read_state()
    kube = state.get("kube") if state else None
    return kube["kubeconfig"] if kube else None


def ssh_key() -> str:
    return str(RunDir(default_dir()).key)


def known_hosts() -> str:
    """The running lab's known_hosts: every host's key under its name and address."""
    return str(RunDir(default_dir()).known_hosts)


def repo_key() -> str:
    return str(RunDir(default_dir()).repo_key)
