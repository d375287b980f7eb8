"""Probe documents of hosts that match their plan, built from the plan and the file modules'
own render (containerd's files as nvidia-ctk writes them)."""

from __future__ import annotations

import copy

from gpuprov.compare import wanted_files
from gpuprov.contract import (
    CRI_PLUGIN,
    MIG_LAYOUT_PATH,
    MIG_UNIT_PATH,
    MPS_TMPFILES_PATH,
    PROBE_SCHEMA,
    containerd_drop_in_glob,
    containerd_drop_in_path,
)
from gpuprov.hostfiles import device_plugin, kubelet, mig_layout, mig_unit, mps_root
from gpuprov.plan import HostPlan
from tests import containerd_states

A100 = "NVIDIA A100-SXM4-80GB"


def matching_probe(plan: HostPlan) -> dict:
    """The probe document of a host in ``plan``'s state: its GPUs with the planned MIG mode and
    instances (each with its full compute instance), its files as the deploy writes them."""
    files: dict[str, str | None] = dict.fromkeys(wanted_files(plan).files)
    files[plan.settings["device_plugin_config_path"]] = device_plugin.render(plan)
    files[kubelet.target(plan)] = kubelet.render(plan, "kind: KubeletConfiguration\n")
    main = plan.settings["containerd_config_path"]
    files[main] = f'version = 2\nimports = ["{containerd_drop_in_glob(main)}"]\n'
    cri = CRI_PLUGIN[2]
    files[containerd_drop_in_path(main)] = (
        f'version = 2\n[plugins."{cri}".containerd]\n  default_runtime_name = "nvidia"\n'
        f'[plugins."{cri}".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
        f'  options = {{BinaryName = "/usr/bin/nvidia-container-runtime"}}\n'
    )
    if plan.mode == "mig":
        files[MIG_LAYOUT_PATH] = mig_layout.render(plan)
        files[MIG_UNIT_PATH] = mig_unit.render(plan)
    if mps_root.root(plan):
        files[MPS_TMPFILES_PATH] = mps_root.render(plan)
        files[mps_root.root(plan)] = mps_root.DIRECTORY
    return {
        "containerd": copy.deepcopy(containerd_states.MATCHING),
        "schema": PROBE_SCHEMA,
        "nvml": "ok",
        "error": None,
        "driver_version": plan.driver_version,
        "nvml_version": "12.535.261.03",
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
                "name": A100,
                "memory_total_mib": 81920,
                "pci_bus_id": f"00000000:{0x07 + i * 8:02X}:00.0",
                "mig": {"current": gpu.mig_enabled, "pending": gpu.mig_enabled},
                "gpu_instances": [
                    {
                        **instance.as_dict(),
                        "id": n + 1,
                        "compute_instances": [
                            {"id": 0, "profile_id": 0, "slice_count": instance.compute_slices}
                        ],
                    }
                    for n, instance in enumerate(gpu.instances)
                ],
            }
            for i, gpu in enumerate(plan.gpus)
        ],
        "files": files,
    }
