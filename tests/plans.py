"""Plan one host ``n1`` of a test inventory, with the given mode and host data."""

from __future__ import annotations

from pathlib import Path

from gpuprov.controller.inventory import load
from gpuprov.core.plan import HostPlan, build


def plan_for(tmp_path: Path, mode: str, **data) -> HostPlan:
    """``n1`` in ``mode``: two A100-80GB, driver pinned, kubelet drop-in dir set, then ``data``."""
    data = {
        "gpu_model": "A100-80GB",
        "gpu_count": 2,
        "driver_version": "535.261.03",
        "kubelet_config_dir": "/etc/kubernetes/kubelet.conf.d",
        **data,
    }
    # A fresh directory per inventory: pyinfra caches an inventory module by its path.
    directory = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    path = directory / "inv.py"
    path.write_text(f"{mode} = [('n1', {data!r})]\n")
    return build(load(str(path))).host("n1")
