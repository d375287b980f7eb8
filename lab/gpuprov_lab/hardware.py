"""A lab host's simulated hardware: the GPU state file and what its PCI bus shows.

Written at `up`, before any driver exists: the simulated driver's state file (through the
simulator's own admin command, driver not loaded) and /usr/local/share/gpuprov-lab/pci.json,
which the host's ``lspci`` stand-in lists. GPUs show with vendor 10de and the first PCI device id
the catalog has for their model.

>>> [d["device"] for d in pci_devices([{"pci_bus_id": "00000000:07:00.0", "model": "H100-80GB"}])]
['1237', '1041', '2330']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuprov.core import catalog
from gpuprov_lab.errors import LabError
from gpuprov_lab.packages import SIM_STATE
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import admin
from gpuprov_lab.spec import LabHost

SIM_ENV_LINE = f"{SIM_ENV}={SIM_STATE}"

PCI_FILE = "/usr/local/share/gpuprov-lab/pci.json"

# A minimal board around the GPUs, so that `lspci -d 10de:` has something to filter out.
_BOARD = [
    {
        "slot": "0000:00:00.0",
        "class": "0600",
        "class_name": "Host bridge",
        "vendor": "8086",
        "vendor_name": "Intel Corporation",
        "device": "1237",
        "device_name": "440FX - 82441FX PMC",
        "svendor": "1af4",
        "svendor_name": "Red Hat, Inc.",
        "sdevice": "1100",
        "sdevice_name": "Qemu virtual machine",
        "rev": "02",
    },
    {
        "slot": "0000:00:03.0",
        "class": "0200",
        "class_name": "Ethernet controller",
        "vendor": "1af4",
        "vendor_name": "Red Hat, Inc.",
        "device": "1041",
        "device_name": "Virtio 1.0 network device",
        "svendor": "1af4",
        "svendor_name": "Red Hat, Inc.",
        "sdevice": "1100",
        "sdevice_name": "Device 1100",
        "rev": "01",
    },
]


def install(host: LabHost, root: Path) -> None:
    """Give the host mounted at ``root`` its GPUs: sim state (driver unloaded) and PCI list."""
    state = root / SIM_STATE.lstrip("/")
    state.parent.mkdir(parents=True, exist_ok=True)
    try:
        admin.create(str(state), host.model, host.count, seed=host.name)
        admin.run("--state", str(state), "driver", "--unloaded")
    except admin.AdminError as e:
        raise LabError(str(e)) from None
    # Where NVML finds these GPUs is part of the machine, not of the driver package: SSH sessions
    # opened before the driver is installed (pyinfra keeps its first one) must find them after.
    # Until the driver package marks the state loaded, NVML answers DRIVER_NOT_LOADED.
    environment = root / "etc" / "environment"
    line = f"{SIM_ENV_LINE}\n"
    text = environment.read_text() if environment.exists() else ""
    if line not in text:
        environment.write_text(text + line)
    gpus = json.loads(state.read_text())["gpus"]
    pci = root / PCI_FILE.lstrip("/")
    pci.parent.mkdir(parents=True, exist_ok=True)
    pci.write_text(json.dumps(pci_devices(gpus), indent=1) + "\n")


def pci_devices(gpus: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The board's devices plus one 3D controller per simulated GPU, in bus order."""
    devices = list(_BOARD)
    for gpu in gpus:
        model = catalog.find_model(gpu["model"])
        if model is None or not model.pci_device_ids:
            raise LabError(f"GPU model {gpu['model']} has no PCI device id in the catalog")
        device_id = model.pci_device_ids[0].lower().removeprefix("0x")[:4]  # 0x233010DE -> 2330
        domain, bus = gpu["pci_bus_id"].split(":", 1)
        devices.append(
            {
                "slot": f"{domain[-4:]}:{bus}".lower(),
                "class": "0302",
                "class_name": "3D controller",
                "vendor": "10de",
                "vendor_name": "NVIDIA Corporation",
                "device": device_id,
                "device_name": model.nvml_names[0].removeprefix("NVIDIA "),
                "svendor": "10de",
                "svendor_name": "NVIDIA Corporation",
                "sdevice": "0000",
                "sdevice_name": "Device 0000",
                "rev": "a1",
            }
        )
    return devices
