"""The MIG capability minors a lab host must show in ``/proc/driver/nvidia-caps/mig-minors``.

NVIDIA's device plugin turns each MIG device into device nodes by looking up
``gpu<minor>/gi<GI>/access`` and ``gpu<minor>/gi<GI>/ci<CI>/access`` in that file (its
``internal/mig`` GetMigCapabilityDevicePaths); a MIG device without both lines fails the plugin's
device map ("missing MIG GPU instance capability path"). The real driver lists every GI and CI
slot a GPU can have whatever exists now, numbered as here (MIG user guide, "Device Nodes and
Capabilities": config 1, monitor 2, then per GPU 15 GIs each followed by its 8 CIs).

>>> mig_minors(1).splitlines()[:4]
['config 1', 'monitor 2', 'gpu0/gi0/access 3', 'gpu0/gi0/ci0/access 4']
"""

from __future__ import annotations

GPU_INSTANCE_SLOTS = 15
COMPUTE_INSTANCE_SLOTS = 8


def mig_minors(gpu_count: int) -> str:
    """The file's text for GPUs with minor numbers ``0 .. gpu_count - 1``."""
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(gpu_count):
        for gi in range(GPU_INSTANCE_SLOTS):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(COMPUTE_INSTANCE_SLOTS):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    return "\n".join(lines) + "\n"
