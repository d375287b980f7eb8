"""The NVIDIA GPUs a host has, read before anything is installed and after.

With a working driver ``nvidia-smi`` names each GPU; without one (a fresh host, or a driver that
is installed but not loaded) the PCI bus still lists the devices, by PCI id.
"""

from __future__ import annotations

import csv
import shlex
from typing import TypedDict

from pyinfra.api import FactBase
from typing_extensions import override

# Display controllers only: 0300 VGA, 0302 3D. An NVSwitch (0680) or a GPU's audio function
# (0403) shares the vendor id but is not a GPU.
_GPU_CLASSES = ("0300", "0302")


class Gpu(TypedDict):
    index: int
    name: str | None  # NVML product name (nvidia-smi only)
    pci_device_id: str | None  # "0x20B210DE", the catalog's format (lspci only)
    pci_bus_id: str | None
    driver_version: str | None


class Hardware(TypedDict):
    source: str | None  # "nvidia-smi" | "lspci" | None (neither worked)
    gpus: list[Gpu]


class GpuHardware(FactBase[Hardware]):
    """
    The host's NVIDIA GPUs, from ``nvidia-smi`` when the driver answers, else from ``lspci``.

    .. code:: python

        {"source": "lspci", "gpus": [
            {"index": 0, "name": None, "pci_device_id": "0x20B210DE",
             "pci_bus_id": "0000:07:00.0", "driver_version": None},
        ]}
    """

    @staticmethod
    def default() -> Hardware:
        return Hardware(source=None, gpus=[])

    # The query fields are the ones the simulated driver's nvidia-smi supports too.
    command = (
        "if out=$(nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total "
        "--format=csv,noheader 2>/dev/null) && [ -n \"$out\" ]; then echo '@@ nvidia-smi'; "
        "printf '%s\\n' \"$out\"; elif command -v lspci >/dev/null; then echo '@@ lspci'; "
        "lspci -Dnmm -d 10de:; fi"
    )

    @override
    def process(self, output: list[str]) -> Hardware:
        if not output:
            return self.default()
        source, lines = output[0].removeprefix("@@ "), output[1:]
        if source == "nvidia-smi":
            gpus = [_smi_gpu(row) for row in csv.reader(lines, skipinitialspace=True) if row]
        else:
            gpus = [gpu for gpu in (_pci_gpu(line) for line in lines) if gpu is not None]
            for index, gpu in enumerate(gpus):
                gpu["index"] = index
        return Hardware(source=source, gpus=gpus)


def _smi_gpu(row: list[str]) -> Gpu:
    index, name, _uuid, driver, _memory = (row + [""] * 5)[:5]
    return Gpu(
        index=int(index),
        name=name,
        pci_device_id=None,
        pci_bus_id=None,
        driver_version=driver or None,
    )


def _pci_gpu(line: str) -> Gpu | None:
    # `lspci -nmm`: slot "class" "vendor" "device" [-rREV] [-pPROGIF] "subvendor" "subdevice"
    fields = shlex.split(line)
    if len(fields) < 4 or fields[1] not in _GPU_CLASSES:
        return None
    vendor, device = fields[2], fields[3]
    return Gpu(
        index=-1,
        name=None,
        pci_device_id=f"0x{device}{vendor}".upper().replace("0X", "0x"),
        pci_bus_id=fields[0],
        driver_version=None,
    )
