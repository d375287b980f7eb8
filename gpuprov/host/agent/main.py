"""The agent's command line: ``python3 agent.pyz probe|apply|settle ...``.

``apply`` prints the JSON report and exits 0 (done), 1 (failed), 2 (a layout file that is
malformed or breaks the GPUs' MIG rules: one ``error:`` line per problem on stderr, nothing
changed) or 3 (a reboot is required and allowed).

>>> main(["apply", "--layout", "/etc/gpuprov/mig-layout.json", "--check"])  # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import json
import sys

from gpuprov.host.contract import AGENT_EXIT_BAD_INPUT, MIG_LAYOUT_PATH


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["probe"]:
        from gpuprov.host.agent import probe

        return probe.main(args[1:])
    if args[:1] == ["settle"]:
        from gpuprov.host.kubelet import settle

        return settle.main(args[1:])
    parser = _parser()
    options = parser.parse_args(args)
    return _apply(options.layout, boot=options.boot, check=options.check)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent.pyz", description="gpuprov host-side agent.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{probe,apply,settle}")
    commands.add_parser("probe", help="print the probe JSON document (see `probe --help`)")
    commands.add_parser(
        "settle", help="wait until the kubelet has the planned devices (see `settle --help`)"
    )
    apply = commands.add_parser("apply", help="make the GPUs match the MIG layout file")
    apply.add_argument(
        "--layout", default=MIG_LAYOUT_PATH, help=f"the MIG layout file (default {MIG_LAYOUT_PATH})"
    )
    apply.add_argument(
        "--boot", action="store_true", help="run from the boot unit: never ask for a reboot"
    )
    apply.add_argument(
        "--check", action="store_true", help="only report what would change; change nothing"
    )
    return parser


def _apply(path: str, *, boot: bool, check: bool) -> int:
    from gpuprov.host.mig import apply, layout

    try:
        planned = layout.load(path)
    except layout.LayoutError as e:
        print(f"error: {e}", file=sys.stderr)
        return AGENT_EXIT_BAD_INPUT
    code, report = apply.run(planned, boot=boot, check=check)
    if report["refused"]:
        for problem in report["refused"]:
            print(f"error: {path}: {problem}", file=sys.stderr)
        return code
    print(json.dumps(report, indent=2))
    if report["error"]:
        print(f"error: {report['error']}", file=sys.stderr)
    return code
