"""JSON fixture tests for gpuprov's facts (tests/facts/<module>.<Fact>/*.json)."""

from pathlib import Path

from pyinfra_testing.facts import make_fact_tests

BASE = Path(__file__).parent / "facts"

for _fact_path in sorted(d.name for d in BASE.iterdir() if d.is_dir()):
    locals()[_fact_path] = make_fact_tests(
        "gpuprov.controller.facts", _fact_path, BASE / _fact_path
    )
