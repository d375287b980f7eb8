"""What containerd says about its own configuration (``gpuprov.host.containerd_state``)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase
from typing_extensions import override

from gpuprov.host import containerd_state
from gpuprov.host.contract import CONTAINERD_CONFIG_PATH, containerd_drop_in_path


class ContainerdState(FactBase[dict[str, Any]]):
    """
    containerd's release, its configuration without gpuprov's drop-in (``source``) and the text
    of the files that configuration imports (``imports``, ``path TAB base64`` lines), each as
    ``{"ok": bool, "text": str}``; more ``sections`` (``dump``, ``plugins``) when asked.

    .. code:: python

        {
            "version": {"ok": True, "text": "containerd github.com/containerd/containerd 1.6.20"},
            "source": {"ok": True, "text": "version = 2\\n[plugins...]..."},
            "imports": {"ok": True, "text": "/etc/containerd/config.toml\\tdmVyc2lvbiA9IDIK"},
        }
    """

    default = dict

    @override
    def command(
        self,
        path: str = CONTAINERD_CONFIG_PATH,
        sections: tuple[str, ...] = ("version", "source", "imports"),
    ) -> str:
        return containerd_state.command(path, containerd_drop_in_path(path), sections)

    @override
    def process(self, output: list[str]) -> dict[str, Any]:
        return containerd_state.parse(output)
