"""Probe documents of hosts that match their plan, built from the plan and the file modules'
own render (containerd's files as nvidia-ctk writes them), the packages and units as the deploy
leaves them on a Debian host, and the kubelet's checkpoint as the real kubelet writes it once
NVIDIA's plugin registered the planned resources."""

from __future__ import annotations

import copy
import hashlib
import json
import socket
from pathlib import Path

from gpuprov.core.checks import units
from gpuprov.core.checks.host import wanted_files
from gpuprov.core.hostfiles import (
    apt_preferences,
    apt_source,
    device_plugin,
    kubelet,
    mig_layout,
    mig_unit,
    mps_root,
    nouveau_blacklist,
)
from gpuprov.core.packaging import planned
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    APT_PIN_PATH,
    CRI_PLUGIN,
    KUBELET_DEVICE_PLUGIN_DIR,
    KUBELET_SOCKET_NAME,
    MIG_LAYOUT_PATH,
    MIG_UNIT_PATH,
    MPS_TMPFILES_PATH,
    NOUVEAU_BLACKLIST_PATH,
    OS_RELEASE_PATH,
    PROBE_SCHEMA,
    containerd_drop_in_glob,
    containerd_drop_in_path,
    device_plugin_socket,
    file_record_path,
)
from tests import containerd_states

A100 = "NVIDIA A100-SXM4-80GB"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n'


def matching_probe(plan: HostPlan) -> dict:
    """The probe document of a host in ``plan``'s state: its GPUs with the planned MIG mode and
    instances (each with its full compute instance), its files as the deploy writes them."""
    files: dict[str, str | None] = dict.fromkeys(wanted_files(plan).files)
    files[plan.device_plugin.device_plugin_config_path] = device_plugin.render(plan)
    files[kubelet.target(plan)] = kubelet.render(plan, "kind: KubeletConfiguration\n")
    main = plan.runtime.containerd_config_path
    files[main] = f'version = 2\nimports = ["{containerd_drop_in_glob(main)}"]\n'
    cri = CRI_PLUGIN[2]
    files[containerd_drop_in_path(main)] = (
        f'version = 2\n[plugins."{cri}".containerd]\n  default_runtime_name = "nvidia"\n'
        f'[plugins."{cri}".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
        f'  options = {{BinaryName = "/usr/bin/nvidia-container-runtime"}}\n'
    )
    files.update(driver_and_mig_files(plan))
    if mps_root.root(plan):
        files[MPS_TMPFILES_PATH] = mps_root.render(plan)
        files[mps_root.root(plan)] = mps_root.DIRECTORY
    return {
        "containerd": copy.deepcopy(containerd_states.MATCHING),
        "schema": PROBE_SCHEMA,
        "nvml": "ok",
        "error": None,
        "driver_version": plan.driver.driver_version,
        "nvml_version": "12.535.261.03",
        "gpus": [
            {
                "index": i,
                "uuid": gpu_uuid(i),
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
        "kubelet_devices": kubelet_devices(plan),
        "packages": installed_packages(plan),
        "units": unit_states(plan),
    }


def driver_and_mig_files(plan: HostPlan) -> dict[str, str | None]:
    """The files at fixed paths as the deploy leaves them: the host's /etc/os-release (Debian)
    where it chooses the driver's source, the apt sources, keyrings and pin file, the nouveau
    blacklist, and on a ``mig`` host the layout and boot unit with gpuprov's records of them
    (absent elsewhere)."""
    files: dict[str, str | None] = {MIG_LAYOUT_PATH: None, MIG_UNIT_PATH: None}
    if plan.mode == "mig":
        for path, text in (
            (MIG_LAYOUT_PATH, mig_layout.render(plan)),
            (MIG_UNIT_PATH, mig_unit.render(plan)),
        ):
            files[path] = text
            files[file_record_path(path)] = f"{hashlib.sha1(text.encode()).hexdigest()}  {path}\n"
    if OS_RELEASE_PATH in wanted_files(plan).files:
        files[OS_RELEASE_PATH] = DEBIAN
    files[APT_PIN_PATH] = apt_preferences.render(plan, "debian")
    if nouveau_blacklist.wanted(plan):
        files[NOUVEAU_BLACKLIST_PATH] = nouveau_blacklist.render(plan)
    for repo in apt_source.repositories(plan):
        files[repo.source_path] = apt_source.render(repo)
        if repo.keyring_path:
            files[repo.keyring_path] = repo.key_data().decode(errors="replace")
    return files


def unit_states(plan: HostPlan) -> dict[str, dict[str, str]]:
    """The probe's ``units`` section as the deploy leaves the host: the driver's services enabled
    and running, the MIG boot unit enabled (a oneshot, inactive after boot) on a ``mig`` host
    and absent elsewhere."""
    return {
        unit: {
            "enabled": "enabled" if want.enabled else "",
            "active": "active" if want.running else "inactive" if want.enabled else "",
        }
        for unit, want in units.wanted(plan).items()
    }


def debian_version(planned_version: str) -> str:
    """The Debian version a Debian host installs for a planned upstream (or Debian) version."""
    return planned_version if "-" in planned_version else f"{planned_version}-1"


def installed_packages(plan: HostPlan) -> dict[str, dict]:
    """The probe's ``packages`` section of a Debian host as the deploy leaves it: the planned
    driver's and toolkit's packages at the planned versions, held."""
    out = {}
    if plan.driver.driver_version:
        _, driver = planned.driver_packages(plan, "debian")
        version = debian_version(driver.version)
        out.update({name: {"version": version, "held": True} for name in driver.exact})
        out.update({name: {"version": "535.171.04-1~deb12u1", "held": True} for name in driver.own})
    toolkit = plan.runtime.container_toolkit_version
    for name in planned.toolkit_packages(plan):
        out[name] = {"version": debian_version(toolkit), "held": True}
    return out


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-0000-0000-0000-000000000000"


def registered(plan: HostPlan) -> dict[str, list[str]]:
    """What NVIDIA's plugin registers for ``plan``: ids ``GPU-<uuid>::<replica>`` time-sliced,
    ``MIG-<uuid>`` per MIG device, ``GPU-<uuid>`` per whole card (the real plugin's forms,
    tests/test_kubelet_checkpoint.py)."""
    if plan.vgpu:  # the flavour's plugin's ids; only their number is compared
        return {r: [f"{r}-{k}" for k in range(n)] for r, n in plan.resources.items()}
    out: dict[str, list[str]] = {}
    for i, gpu in enumerate(plan.gpus):
        uuid = gpu_uuid(i)
        if plan.sharing:
            name = next(iter(plan.resources))
            out.setdefault(name, []).extend(f"{uuid}::{k}" for k in range(gpu.replicas))
        elif gpu.mig_enabled:
            for n, instance in enumerate(gpu.instances):
                name = next(
                    r
                    for r in plan.resources
                    if r
                    in ("nvidia.com/gpu", "nvidia.com/mig-" + instance.profile.replace("+", "."))
                )
                out.setdefault(name, []).append(f"MIG-{i:08x}-{n:04x}-0000-0000-000000000000")
        else:
            out.setdefault("nvidia.com/gpu", []).append(uuid)
    return out


def checkpoint(devices: dict[str, list[str]]) -> str:
    """The checkpoint text the kubelet writes (``checkpoint.Data``, compact JSON)."""
    data = {"Data": {"PodDeviceEntries": None, "RegisteredDevices": devices}, "Checksum": 1}
    return json.dumps(data, separators=(",", ":"))


def kubelet_devices(plan: HostPlan) -> dict:
    """The probe's ``kubelet_devices`` section of a node serving exactly ``plan``'s resources."""
    devices = registered(plan)
    return {
        "directory": KUBELET_DEVICE_PLUGIN_DIR,
        "checkpoint": checkpoint(devices),
        # On a vgpu host the flavour's plugin serves them, on a socket that is not NVIDIA's.
        "sockets": sorted(
            [KUBELET_SOCKET_NAME]
            + ([] if plan.vgpu else [s for s in map(device_plugin_socket, devices) if s])
        ),
    }


def kubelet_directory(directory: Path, plan: HostPlan) -> None:
    """A kubelet device-plugin directory as a node serving ``plan`` has it: the checkpoint and
    real unix sockets (bound, then closed: the file stays, as a socket file does)."""
    section = kubelet_devices(plan)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kubelet_internal_checkpoint").write_text(section["checkpoint"])
    for name in section["sockets"]:
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(str(directory / name))
