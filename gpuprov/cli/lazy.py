"""click groups whose subcommands are imported only when one of them runs.

A pure command (``mig check``) then loads neither pyinfra nor paramiko, whatever its siblings
import; ``--help`` lists every subcommand, and imports them to show their help lines.

>>> group = LazyGroup("demo", commands={"plan": "gpuprov.cli.plan:plan"})
>>> group.list_commands(None)
['plan']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

import click


class LazyGroup(click.Group):
    """A click group with subcommands named as ``"module:attribute"`` (imported on first use)
    besides those added directly, and optionally more from ``extra`` (name -> loader)."""

    def __init__(
        self,
        *args,
        commands: Mapping[str, str] | None = None,
        extra: Callable[[], Mapping[str, Callable[[], click.Command]]] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(commands or {})
        self.extra = extra

    def _extra(self) -> Mapping[str, Callable[[], click.Command]]:
        found = self.extra() if self.extra else {}
        return {n: load for n, load in found.items() if n not in self.lazy}

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy, *self._extra()})

    def get_command(self, ctx: click.Context | None, name: str) -> click.Command | None:
        if name in self.lazy:
            module, _, attribute = self.lazy[name].partition(":")
            return getattr(importlib.import_module(module), attribute)
        command = super().get_command(ctx, name)
        if command is None and name in (extra := self._extra()):
            command = extra[name]()
        return command
