"""Fail one host, with a message, without stopping the others.

An exception raised inside an operation aborts the whole pyinfra run, every host included. A
command that fails marks only its own host as failed, so host-specific refusals are yielded as
one of these instead.
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand


def _refuse(state, host, message: str) -> bool:
    host.log_styled(f"gpuprov: {message}", fg="red", log_func=logger.error)
    return False


def refuse(message: str) -> FunctionCommand:
    """A command that prints ``message`` and fails its host."""
    return FunctionCommand(_refuse, (message,), {})
