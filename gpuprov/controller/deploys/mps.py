"""The host side of MPS (``sharing_strategy: mps``): the MPS root directory, made by a tmpfiles.d
entry at every boot and by ``systemd-tmpfiles --create`` when the deploy writes the entry. The MPS
control daemon itself, its shm mount and its pipes are the device plugin chart's
(docs/sharing.md). A host that stops using MPS loses the entry; the directory under /run stays
until the next boot, since the chart's daemon may still hold its shm mount there."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import server

from gpuprov.controller.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.core.hostfiles import mps_root
from gpuprov.host.contract import MPS_TMPFILES_PATH


def watch() -> Watch:
    return Watch(paths=(MPS_TMPFILES_PATH,))


@deploy("MPS root")
def mps(view: HostView) -> None:
    text = mps_root.render(view.plan)
    root = mps_root.root(view.plan)
    what = f"MPS root {root}, made at boot" if root else "no MPS root (host does not use MPS)"
    op = ensure_file(view, what, MPS_TMPFILES_PATH, text or "", present=text is not None)
    if op and root is not None:
        server.shell(
            name=f"MPS root {root} made now",
            commands=[mps_root.create_command()],
            _if=changed(op),
        )
