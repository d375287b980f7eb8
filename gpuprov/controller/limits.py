"""Time limits below the per-step ones: apt's own on a stalled download, and the reboot's.

Each remote step of the deploy runs under pyinfra's ``_timeout`` with a limit from the plan's
``gpuprov_timeout_*`` settings (docs/variables.md). Those end the controller's wait; apt gets
its own options too, so that a mirror which accepts a connection and then says nothing ends the
download on the host as well, with apt's message naming the mirror, well inside the step's
limit, instead of leaving an `apt-get` behind that holds apt's locks.

apt-transport-http(1): "Acquire::http::Timeout sets the timeout timer used by the method; this
value applies to the connection as well as the data timeout", so it also ends a transfer whose
body stalls (measured with apt 2.6.1 against a server that accepts and never answers, and one
that stops in the middle of a body). ``Acquire::Retries`` (apt.conf(5)) tries a failed file
again, with a growing delay. ``apt-get update`` only warns about an index it could not fetch and
exits 0; ``APT::Update::Error-Mode "any"`` (apt >= 2.1.16; apt's configure-index) makes that an
error, so the step that could not reach the repository is the one that fails.

>>> APT_UPDATE
'apt-get -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20 -o Acquire::Retries=2 -o APT::Update::Error-Mode=any update -q'
>>> reboot_limit(delay=5, reboot_timeout=600)
665
"""

from __future__ import annotations

# A healthy mirror is never silent for 20 s; 3 tries of a stuck file end in about 70 s, far
# inside gpuprov_timeout_apt_update's 300 s.
APT_STALL_SECONDS = 20
APT_RETRIES = 2
APT_OPTIONS = (
    f"-o Acquire::http::Timeout={APT_STALL_SECONDS} "
    f"-o Acquire::https::Timeout={APT_STALL_SECONDS} "
    f"-o Acquire::Retries={APT_RETRIES}"
)
APT_UPDATE = f"apt-get {APT_OPTIONS} -o APT::Update::Error-Mode=any update -q"

# `kubectl drain --timeout` ends the drain itself; its step also covers the cordon before it.
DRAIN_MARGIN = 60

# pyinfra's reboot waits `delay`, then up to `reboot_timeout` for the host; its step limit must
# cover both, plus reconnecting.
REBOOT_MARGIN = 60


def reboot_limit(delay: int, reboot_timeout: int) -> int:
    """The step limit of a reboot that waits ``delay`` s and then up to ``reboot_timeout`` s."""
    return delay + reboot_timeout + REBOOT_MARGIN
