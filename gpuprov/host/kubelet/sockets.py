"""The sockets in the kubelet's device-plugin directory, listed on the host for the probe.

The directory (``/var/lib/kubelet/device-plugins``) holds the kubelet's own ``kubelet.sock``
and one socket per resource a device plugin serves. A plugin that stopped takes its socket with
it, while the kubelet's checkpoint beside them keeps its devices for minutes, so verify reads
both (the probe's ``kubelet_devices`` section; ``gpuprov.core.checks.kubelet_devices`` compares).
Stdlib only: it runs in the agent bundle.

>>> sockets("/nonexistent") is None
True
"""

from __future__ import annotations

import os
import stat

from gpuprov.host.contract import DEVICE_PLUGIN_SOCKETS_MAX


def sockets(directory: str) -> list[str] | dict[str, str] | None:
    """The sorted names of the sockets in ``directory`` (links not followed); None when the
    directory does not exist; ``{"error": why}`` when it cannot be listed or holds more than
    ``DEVICE_PLUGIN_SOCKETS_MAX`` sockets."""
    names = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                        names.append(entry.name)
                except FileNotFoundError:  # gone between the listing and the stat
                    continue
                if len(names) > DEVICE_PLUGIN_SOCKETS_MAX:
                    return {"error": f"more than {DEVICE_PLUGIN_SOCKETS_MAX} sockets"}
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        return {"error": f"unreadable: {e.strerror}"}
    return sorted(names)
