"""The reference docs stay in step with the code they describe."""

from __future__ import annotations

from pathlib import Path

from gpuprov.cli.variables import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_variables_reference_lists_every_key_with_its_default():
    text = (ROOT / "docs" / "variables.md").read_text()
    assert markdown() in text, "regenerate with: gpuprov variables --format markdown"
