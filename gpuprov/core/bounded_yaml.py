"""YAML a user hands gpuprov (a mig-parted config), loaded with bounds on what it can cost.

PyYAML's safe loader expands nothing itself, but what it returns can still be hostile: aliases
make a few lines a structure of billions of nodes for whoever walks it (a "billion laughs"),
nesting thousands deep breaks every recursive walk (``RecursionError``), and a 5000-digit
integer breaks ``str()`` of it (``ValueError``, Python's int-to-text limit). So, before anything
is built, one pass over the parser's events (libyaml's, in C, when PyYAML has it) refuses
aliases and nesting deeper than ``MAX_DEPTH``; then the document is built by the same fast
loader, whose integers are refused above ``MAX_INT_CHARS`` characters. The text must be UTF-8
(a UTF-16 or UTF-32 file, which PyYAML would otherwise take, is refused: the tools that read
these files read UTF-8) and at most ``MAX_BYTES``.

>>> load(b"version: v1\\nmig-configs: {all-1g: [{devices: all}]}\\n")
{'version': 'v1', 'mig-configs': {'all-1g': [{'devices': 'all'}]}}
>>> try:
...     load(b"a: &x [1]\\nb: *x\\n")
... except YamlRefused as e:
...     print(e)
line 2: an alias (*x): aliases are not accepted
"""

from __future__ import annotations

import codecs
from typing import Any

import yaml

# 4 MiB: NVIDIA's own default mig-parted config is about 30 KB, and 20,000 configs 1.7 MB.
MAX_BYTES = 4 << 20
# mig-parted's schema nests 5 deep (mig-configs > name > list > item > mig-devices).
MAX_DEPTH = 32
# A uint64 has 20 digits; with a sign, a base prefix or `_` separators a little more.
MAX_INT_CHARS = 32

_FAST = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


class YamlRefused(ValueError):
    """The text is not YAML gpuprov will load; the message says why and where (line)."""


class _Loader(_FAST):
    """The fast safe loader, with integers bounded before they are converted."""


def _bounded_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    if len(node.value) > MAX_INT_CHARS:
        raise YamlRefused(
            f"line {node.start_mark.line + 1}: an integer of {len(node.value)} characters "
            f"(at most {MAX_INT_CHARS})"
        )
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def load(data: bytes) -> Any:
    """The single YAML document in ``data``; YamlRefused when it is not one gpuprov loads."""
    if len(data) > MAX_BYTES:
        raise YamlRefused(f"larger than {MAX_BYTES} bytes ({len(data)})")
    text = _text(data)
    try:
        _check_events(text)
        return yaml.load(text, Loader=_Loader)
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, BEL, ...)
        line = text[: e.position].count("\n") + 1
        raise YamlRefused(f"line {line}: not YAML: character #x{e.character:04x}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise YamlRefused(f"{where}not YAML: {problem}") from None


def _text(data: bytes) -> str:
    for bom, encoding in _BOMS.items():  # UTF-32's BOM starts with UTF-16's: checked first
        if data.startswith(bom):
            raise YamlRefused(f"{encoding} text; save the file as UTF-8")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise YamlRefused(f"line {line}: not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def _check_events(text: str) -> None:
    """Refuse aliases and deep nesting from the parser's events, before any node is built."""
    depth = 0
    for event in yaml.parse(text, Loader=_FAST):
        if isinstance(event, yaml.AliasEvent):
            raise YamlRefused(
                f"line {event.start_mark.line + 1}: an alias (*{event.anchor}): aliases are "
                "not accepted"
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlRefused(
                    f"line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} deep"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
