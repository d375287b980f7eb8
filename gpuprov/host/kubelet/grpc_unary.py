"""One unary gRPC call over a unix socket, as the kubelet's local APIs are served.

Why not grpcio: the agent bundle runs on the host's own ``python3`` with the standard library
only (plus what the bundle carries), and grpcio is a compiled extension per Python version (or
Debian's ``python3-grpcio``, a package every GPU host would have to install before verify could
look). A unary call is small on the wire (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md):
an HTTP/2 ``POST /<package>.<Service>/<Method>`` with ``content-type: application/grpc`` and
``te: trailers``, one length-prefixed message (1 byte "compressed" flag, 4 bytes big-endian
length, the protobuf bytes), and the answer's status in the ``grpc-status`` trailer (or in the
headers of a trailers-only answer). The HTTP/2 framing, flow control and HPACK (the kubelet's Go
server Huffman-codes its headers) come from python-hyper's ``h2`` (pure Python, carried in the
bundle; gpuprov/controller/bundle.py); this module adds only the gRPC framing above.

>>> call("/nonexistent.sock", "/v1.PodResourcesLister/List", b"", timeout=1.0)
Traceback (most recent call last):
...
gpuprov.host.kubelet.grpc_unary.GrpcError: cannot connect to /nonexistent.sock: No such file or directory
"""

from __future__ import annotations

import socket
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

_PREFIX = 5  # the length-prefixed message's header: flag byte + uint32 length
_READ = 65536
GRPC_OK = 0


class GrpcError(Exception):
    """The call did not give one message with status OK; the message says why."""


class GrpcStatusError(GrpcError):
    """The server answered, with a status other than OK (the method is not served, refused):
    unlike a socket nobody listens on yet, asking again will not change it."""


def call(path: str, method: str, request: bytes, timeout: float, max_bytes: int = 4 << 20) -> bytes:
    """The response message of unary ``method`` (``/package.Service/Method``) given the
    serialized ``request``, from the server on unix socket ``path``; at most ``timeout``
    seconds in all and ``max_bytes`` of response; GrpcError otherwise."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as e:
            raise GrpcError(f"cannot connect to {path}: {e.strerror or e}") from None
        return _exchange(sock, path, method, request, deadline, max_bytes)
    finally:
        sock.close()


def _exchange(
    sock: socket.socket, path: str, method: str, request: bytes, deadline: float, max_bytes: int
) -> bytes:
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    connection.initiate_connection()
    stream = connection.get_next_available_stream_id()
    remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
    connection.send_headers(
        stream,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", method),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", f"{remaining_ms}m"),
        ],
    )
    connection.send_data(stream, _framed(request), end_stream=True)
    headers: dict[str, str] = {}
    body = bytearray()
    ended = False
    try:
        while not ended:
            sock.sendall(connection.data_to_send())
            left = deadline - time.monotonic()
            if left <= 0:
                raise GrpcError(f"no answer from {path} in time")
            sock.settimeout(left)
            data = sock.recv(_READ)
            if not data:
                raise GrpcError(f"{path} closed the connection before answering")
            for event in connection.receive_data(data):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    headers.update((str(k), str(v)) for k, v in event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    if len(body) > max_bytes + _PREFIX:
                        raise GrpcError(f"the answer is larger than {max_bytes} bytes")
                    connection.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamReset):
                    raise GrpcError(f"{path} reset the call (HTTP/2 error {event.error_code})")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise GrpcError(f"{path} closed the connection (HTTP/2 {event.error_code})")
                elif isinstance(event, h2.events.StreamEnded):
                    ended = True
    except TimeoutError:
        raise GrpcError(f"no answer from {path} in time") from None
    except OSError as e:
        raise GrpcError(f"talking to {path}: {e.strerror or e}") from None
    except h2.exceptions.ProtocolError as e:
        raise GrpcError(f"{path} broke HTTP/2: {e}") from None
    return _message(path, headers, bytes(body))


def _framed(message: bytes) -> bytes:
    """``message`` as gRPC sends one: uncompressed flag, big-endian length, bytes."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def _message(path: str, headers: dict[str, str], body: bytes) -> bytes:
    """The one message of a finished call; GrpcError for a status other than OK."""
    if headers.get(":status") != "200":
        raise GrpcStatusError(f"{path} answered HTTP status {headers.get(':status')}")
    status = headers.get("grpc-status")
    if status != str(GRPC_OK):
        raise GrpcStatusError(
            f"{path} answered gRPC status {status}: {headers.get('grpc-message', '')[:200]}"
        )
    if len(body) < _PREFIX or body[0] != 0:
        raise GrpcError(f"{path} answered OK without one uncompressed message")
    length = int.from_bytes(body[1:_PREFIX], "big")
    if len(body) != _PREFIX + length:
        raise GrpcError(f"{path} answered {len(body) - _PREFIX} bytes for a {length}-byte message")
    return body[_PREFIX:]
