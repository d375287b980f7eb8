"""The reference docs stay in step with the code they describe."""

from __future__ import annotations

import re
from pathlib import Path

from gpuprov.cli.variables import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_variables_reference_lists_every_key_with_its_default():
    text = (ROOT / "docs" / "variables.md").read_text()
    assert markdown() in text, "regenerate with: gpuprov variables --format markdown"


def _modules() -> list[str]:
    """Every Python module and package of gpuprov, as a path relative to the repository."""
    out = []
    for path in sorted((ROOT / "gpuprov").rglob("*.py")):
        if path.name == "__init__.py":
            out.append(f"{path.parent.relative_to(ROOT)}/")
        elif path.name != "__main__.py":
            out.append(str(path.relative_to(ROOT)))
    return out


def test_architecture_lists_every_module_that_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [m for m in _modules() if f"`{m}`" not in text]
    assert missing == [], "docs/architecture.md does not list these modules"


def test_architecture_lists_no_module_that_does_not_exist():
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`(gpuprov/[\w/]+(?:\.py|/))`", text))
    assert sorted(named - set(_modules())) == []


def test_docs_cite_nothing_outside_the_repository():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        assert "../shared" not in text and "reference/" not in text, path
