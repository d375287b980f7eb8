"""Render the templates in ``templates/`` (shipped as ``gpuprov.templates``)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import jinja2


@cache
def _environment() -> jinja2.Environment:
    root = files("gpuprov.templates")
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: root.joinpath(name).read_text()),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(template: str, **data: Any) -> str:
    """``render("gpuprov-mig.service.j2", layout=..., ...)`` -> the file's text."""
    return _environment().get_template(template).render(**data)
