"""SSH keepalives, so that a host which stops answering in the middle of a run fails in bounded time.

pyinfra 3.10's SSH connector turns paramiko's keepalive on only from an ssh_config
``ServerAliveInterval`` (``connectors/sshuserclient/client.py``), and paramiko's keepalive is a
message that wants no reply (``Transport.set_keepalive``): on its own it notices nothing. What
notices is the kernel: with a keepalive in flight every ``interval(dead_after)`` seconds there is
always unacknowledged data towards a silent host, and ``TCP_USER_TIMEOUT`` (tcp(7)) closes a
connection whose data stays unacknowledged for ``dead_after`` seconds. The command waiting on
that host then ends with a socket error, pyinfra fails that host, and the others go on: a host
that drops off is failed within ``dead_after + interval(dead_after)`` seconds (40 s with the
default ``gpuprov_ssh_dead_after`` of 30). Without this, a dead host holds the run until TCP's
own retransmissions give up, about 15 minutes on Linux.

The options are set on every connection as it is made (``host_connect``), so the reconnection
after a reboot gets them too.

A connection that dies while a command is being started makes paramiko raise its transport
thread's ``EOFError`` from ``exec_command``; pyinfra 3.10 handles ``OSError`` and
``SSHException`` around a command but not that, and one uncaught ``EOFError`` ends the whole
run ("An internal exception occurred"; seen on the lab with a host's link cut). Each connection
therefore reports a lost connection as the ``SSHException`` it is, and only its host fails.

>>> interval(30)
10
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from paramiko import SSHException, Transport
from pyinfra import logger
from pyinfra.api import BaseStateCallback, State
from pyinfra.api.host import Host


def interval(dead_after: int) -> int:
    """Seconds between keepalives for a host counted gone after ``dead_after`` silent seconds."""
    return max(1, dead_after // 3)


def apply(host: Host, dead_after: int) -> bool:
    """Keepalives and ``TCP_USER_TIMEOUT`` on ``host``'s open SSH connection; False when it has
    none (another connector, or not connected)."""
    client = getattr(host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None:
        return False
    transport.set_keepalive(interval(dead_after))
    _lost_connection_is_ssh_error(transport)
    sock = transport.sock
    # A ProxyCommand / ProxyJump connection has no TCP socket of its own here; the keepalive
    # still goes out, and the proxy's connection ends on its own terms.
    if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, dead_after * 1000)
    return True


def _lost_connection_is_ssh_error(transport: Transport) -> None:
    """``transport.get_exception`` (what paramiko raises when the transport thread has ended)
    gives an ``SSHException`` for an ``EOFError``."""
    stored = transport.get_exception

    def get_exception() -> Exception | None:
        error = stored()
        if isinstance(error, EOFError):
            return SSHException("the connection was lost (no answer from the host)")
        return error

    transport.get_exception = get_exception


class Keepalive(BaseStateCallback):
    """Applies keepalives to each host of ``dead_after`` (name -> seconds) whenever it connects.

    >>> state = State()                                                    # doctest: +SKIP
    >>> state.add_callback_handler(Keepalive({"gpu-1": 30}))              # doctest: +SKIP
    """

    def __init__(self, dead_after: Mapping[str, int]) -> None:
        self.dead_after = dict(dead_after)

    def host_connect(self, state: State, host: Host) -> None:
        if host.name in self.dead_after and not apply(host, self.dead_after[host.name]):
            logger.debug("no SSH keepalive for %s (connector %s)", host.name, host.connector)


def watch(state: State, host: Host, dead_after: int) -> None:
    """Keepalives for ``host`` now and on every later connection, in a deploy (one handler per
    run, shared by its hosts)."""
    handler = next((h for h in state.callback_handlers if isinstance(h, Keepalive)), None)
    if handler is None:
        handler = Keepalive({})
        state.add_callback_handler(handler)
    handler.dead_after[host.name] = dead_after
    if host.connected:
        apply(host, dead_after)
