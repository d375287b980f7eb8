"""Reading protobuf messages by the wire format alone, for the kubelet's and the container
runtime's local gRPC answers (``pod_resources``, ``runtime_pods``).

The wire format (https://protobuf.dev/programming-guides/encoding/): each field a varint key
(number << 3 | wire type) and its value; a reader takes the fields it knows and skips the others
by their wire type, as any protobuf parser skips what it does not know. Only what the readers
here need: length-delimited values (strings, sub-messages, repeated fields) and varints.

>>> message = b"\\x0a\\x03pod" + b"\\x18\\x01"   # field 1 "pod", field 3 varint 1
>>> text(message, 1, "Example.name"), number(message, 3, "Example.state")
('pod', 1)
>>> repeated(b"\\x0a\\x05", 1, "Example")
Traceback (most recent call last):
...
gpuprov.host.kubelet.protowire.WireError: Example: field 1 runs past the message
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT, I64, LEN, I32 = 0, 1, 2, 5


class WireError(ValueError):
    """The bytes are not the message they should be; the message says where."""


def repeated(message: bytes, field: int, where: str) -> list[bytes]:
    """Every length-delimited value of ``field`` in ``message``."""
    values = []
    for found, wire, value in fields(message, where):
        if found == field:
            if wire != LEN:
                raise WireError(f"{where} field {field}: wire type {wire}, not bytes")
            values.append(value)
    return values


def text(message: bytes, field: int, where: str) -> str:
    """A proto3 string field: its last value (proto's rule for a repeated scalar), '' if absent."""
    values = repeated(message, field, where)
    return decoded(values[-1], where) if values else ""


def number(message: bytes, field: int, where: str) -> int:
    """A proto3 varint field (an enum, an integer): its last value, 0 if absent."""
    value = 0
    for found, wire, raw in fields(message, where):
        if found == field:
            if wire != VARINT:
                raise WireError(f"{where} field {field}: wire type {wire}, not a varint")
            value, _ = varint(raw, 0, where)
    return value


def decoded(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f"{where}: not UTF-8") from None


def fields(message: bytes, where: str) -> Iterator[tuple[int, int, bytes]]:
    """``(number, wire type, value)`` of each field; a length-delimited value as its bytes, the
    others as their raw bytes."""
    at = 0
    while at < len(message):
        key, at = varint(message, at, where)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise WireError(f"{where}: field number 0")
        if wire == VARINT:
            start = at
            _, at = varint(message, at, where)
        elif wire in (I64, I32):
            start, at = at, at + (8 if wire == I64 else 4)
        elif wire == LEN:
            length, start = varint(message, at, where)
            at = start + length
        else:  # groups (3, 4) are proto2 only; 6, 7 do not exist
            raise WireError(f"{where}: wire type {wire}")
        if at > len(message):
            raise WireError(f"{where}: field {field} runs past the message")
        yield field, wire, message[start:at]


def varint(message: bytes, at: int, where: str) -> tuple[int, int]:
    """The base-128 varint at ``at`` and the offset after it (at most 10 bytes: 64 bits)."""
    value = 0
    for shift in range(0, 70, 7):
        if at >= len(message):
            raise WireError(f"{where}: a varint runs past the message")
        byte = message[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
    raise WireError(f"{where}: a varint longer than 10 bytes")
