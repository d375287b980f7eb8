"""kubelet's ``maxPods``, edited in place in its main config file (the edit itself:
``gpuprov.core.hostfiles.kubelet.with_max_pods``)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from gpuprov.controller.facts.files import FileStates
from gpuprov.controller.operations.files import replace
from gpuprov.controller.operations.refuse import refuse
from gpuprov.core.hostfiles.kubelet import with_max_pods


@operation()
def max_pods(path: str, max_pods: int):
    """
    Ensure the kubelet config file at ``path`` says ``maxPods: max_pods``; nothing else changes.

    + path: kubelet's main config (``kubelet_config_path``)
    + max_pods: the wanted value

    **Example:**

    .. code:: python

        max_pods(path="/var/lib/kubelet/config.yaml", max_pods=142)
    """
    current = host.get_fact(FileStates, paths=[path], read=[path]).get(path)
    if current is None:
        yield refuse(
            f"{path} does not exist: is the kubelet installed? (or set "
            "kubelet_config_dir to write a drop-in)"
        )
        return
    wanted = with_max_pods(current["text"], max_pods)
    if wanted is None:
        yield refuse(f"{path} is not a YAML mapping where maxPods can be set; fix it by hand")
        return
    if wanted == current["text"]:
        host.noop(f"maxPods already {max_pods} in {path}")
        return
    yield from replace(path, wanted, current, "644")
