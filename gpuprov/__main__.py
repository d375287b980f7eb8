"""`python -m gpuprov` runs the CLI."""

from gpuprov.cli import main

main()
