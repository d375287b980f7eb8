"""A stuck mirror for the lab: accepts every connection, reads the request, never answers.

That is what a mirror looks like from a host when its backend hangs: the TCP connection is
made, so connect timeouts never fire, and then nothing comes. The lab runs one on the bridge
address (``services.STUCK_PORT``); a test gives its URL to one host's repository to check that
the deploy fails that host in bounded time and lets the others finish.

    python -m gpuprov_lab.stuck_mirror 10.200.0.1 13181
"""

from __future__ import annotations

import socket
import sys


def serve(address: str, port: int) -> None:
    """Accept and hold connections on ``address:port`` until killed."""
    server = socket.create_server((address, port), backlog=256)
    held = []  # never closed, never answered: the peer waits on an open connection
    while True:
        connection, _ = server.accept()
        held.append(connection)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
