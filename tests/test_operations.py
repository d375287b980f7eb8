"""JSON fixture tests for gpuprov's operations (tests/operations/<module>.<op>/*.json)."""

from pathlib import Path

from pyinfra_testing.operations import make_operation_tests

BASE = Path(__file__).parent / "operations"

for _op_path in sorted(d.name for d in BASE.iterdir() if d.is_dir()):
    locals()[_op_path] = make_operation_tests(
        "gpuprov.controller.operations", _op_path, BASE / _op_path
    )
