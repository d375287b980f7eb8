"""What every managed-file module needs: parse a file's text safely, collect findings, dig into
parsed documents. A file that does not parse is a finding for its host, never an exception.

>>> report = Report("gpu-1")
>>> report.read({"/etc/x.yaml": "a: [1"}, "yaml", "/etc/x.yaml", "device-plugin")
(False, None)
>>> report.findings[0].check, report.findings[0].found.startswith("unparsable YAML")
('device-plugin', True)
>>> dig({"a": {"b": 1}}, "a", "b"), dig({"a": 1}, "a", "b")
(1, None)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from gpuprov.core import errors
from gpuprov.core.findings import Finding

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


class ParseError(ValueError):
    """A file's text is not valid YAML, TOML or JSON."""


def parse(kind: str, text: str) -> Any:
    """``text`` parsed as ``kind`` (``yaml``, ``toml`` or ``json``); ParseError with the first
    line of the parser's message otherwise. The probe puts ``{"error": why}`` in place of a file
    it would not read (too large, not a regular file): that is a ParseError saying why."""
    if not isinstance(text, str):
        why = text.get("error") if isinstance(text, Mapping) else type(text).__name__
        raise ParseError(f"not read by the probe: {why}")
    try:
        if kind == "yaml":
            return yaml.safe_load(text)
        if kind == "toml":
            return tomllib.loads(text)
        return json.loads(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ParseError(f"unparsable {kind.upper()}: {first}") from None


def dig(document: Any, *keys: str) -> Any:
    """``document[k1][k2]...`` or None when any level is missing or not a mapping."""
    for key in keys:
        if not isinstance(document, Mapping):
            return None
        document = document.get(key)
    return document


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """``override`` merged into ``base`` key by key, mappings recursively.

    >>> deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}})
    {'a': {'b': 1, 'c': 3}}
    """
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def scalar(value: Any) -> str:
    """A parsed config value as YAML/JSON would spell it (``true``, ``4``, ``"4"``)."""
    return json.dumps(value)


class Report:
    """The findings of one host's checks, added as they are found."""

    def __init__(self, host: str):
        self.host = host
        self.findings: list[Finding] = []

    def add(self, check: str, expected: str, found: str, hint: str, gpu: int | None = None) -> None:
        self.findings.append(Finding(self.host, gpu, check, expected, found, hint))

    def read(
        self, files: Mapping[str, str | None], kind: str, path: str, check: str
    ) -> tuple[bool, Any]:
        """(present, parsed document) of ``path``; an unparsable file is a finding and counts as
        absent."""
        text = files.get(path)
        if text is None:
            return False, None
        try:
            return True, parse(kind, text)
        except ParseError as e:
            self.add(
                check,
                f"valid {kind.upper()} in {path}",
                str(e),
                f"fix or remove {path}, then run the deploy",
            )
            return False, None


def kind(value: Any) -> str:
    """What a parsed value is, in words.

    >>> kind([1]), kind(None), kind("x")
    ('a list', 'nothing', 'a string')
    """
    if value is None:
        return "nothing"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "a list", dict: "a mapping"})
    return names.get(type(value), f"a {type(value).__name__}")


def shown(value: Any, limit: int = 60) -> str:
    """A scalar as YAML/JSON spells it, cut at ``limit``; a container by its kind, never
    expanded (a few YAML aliases can make a huge one).

    >>> shown(True), shown("4"), shown({"a": 1}), shown("x" * 100)[-5:]
    ('true', '"4"', 'a mapping', 'xx...')
    """
    if isinstance(value, (list, dict)):
        return kind(value)
    if isinstance(value, int) and value.bit_length() > 128:
        return errors.shown(value)  # json.dumps of 5000 digits raises
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str) -> str:
    """``text`` with control characters escaped: safe in a one-line comment or report cell.

    >>> one_line("gpu-1\\nerror: forged")
    'gpu-1\\\\nerror: forged'
    """
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)
