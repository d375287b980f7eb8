"""Pre-flight: the GPUs a host really has must be the ones its plan was made for."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpuprov.controller.facts.hardware import GpuHardware, Hardware
from gpuprov.controller.operations.refuse import refuse
from gpuprov.core import catalog


def mismatch(hardware: Hardware, model: str, count: int) -> str | None:
    """Why ``hardware`` is not ``count`` x ``model``, or None when it is."""
    gpu_model = catalog.find_model(model)
    assert gpu_model is not None, "the planner only plans catalog models"
    gpus = hardware["gpus"]
    if hardware["source"] is None or not gpus:
        found = "no NVIDIA GPU (neither nvidia-smi nor `lspci -d 10de:` lists one)"
    else:
        names = [_describe(g) for g in gpus]
        if len(gpus) == count and all(_is(g, gpu_model) for g in gpus):
            return None
        found = f"{len(gpus)} GPU(s) ({_summary(names)}, from {hardware['source']})"
    return f"the plan expects {count} x {gpu_model.alias}, the host has {found}"


def _is(gpu, model: catalog.GpuModel) -> bool:
    if gpu["name"] is not None:
        return gpu["name"] in model.nvml_names
    return (gpu["pci_device_id"] or "").upper() in {i.upper() for i in model.pci_device_ids}


def _describe(gpu) -> str:
    if gpu["name"] is not None:
        return gpu["name"]
    known = next(
        (
            m.alias
            for m in catalog.load().models.values()
            if (gpu["pci_device_id"] or "").upper() in {i.upper() for i in m.pci_device_ids}
        ),
        None,
    )
    return f"{known or 'unknown'} [PCI {gpu['pci_device_id']}]"


def _summary(names: list[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{c} x {n}" for n, c in counts.items())


@operation()
def gpus(model: str, count: int):
    """
    Ensure the host has exactly ``count`` GPUs of ``model``; otherwise fail this host (only).

    + model: catalog alias of the planned model (``A100-80GB``)
    + count: planned number of GPUs

    **Example:**

    .. code:: python

        gpus(name="Pre-flight: GPUs match the plan", model="H100-80GB", count=8)
    """
    problem = mismatch(host.get_fact(GpuHardware), model, count)
    if problem is None:
        host.noop(f"host has {count} x {model} as planned")
        return
    yield refuse(f"{problem}; nothing on this host was changed")
