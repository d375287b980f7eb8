"""`gpuprov probe`: run the host probe here (the same code the agent runs on GPU hosts)."""

from __future__ import annotations

import sys

import click

from gpuprov.host.agent import probe as host_probe
from gpuprov.host.contract import PROBE_FILE_MAX_BYTES


@click.command()
@click.option(
    "--file",
    "files",
    multiple=True,
    metavar="PATH",
    help=f"Include this file's text (repeatable; missing files are null; at most "
    f'{PROBE_FILE_MAX_BYTES} bytes, larger or special files are {{"error": why}}).',
)
@click.option(
    "--glob",
    "globs",
    multiple=True,
    metavar="PATTERN",
    help="Include every file matching PATTERN (repeatable).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json"]),
    default="json",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--health",
    is_flag=True,
    help="Include each GPU's ECC, row remapping and retired pages, and the kernel log's XIDs "
    "(docs/health.md).",
)
@click.option(
    "--package",
    "packages",
    multiple=True,
    metavar="NAME",
    help="Include this Debian package's installed version and hold (repeatable; a dpkg-query "
    "pattern such as 'nvidia-*' adds every match).",
)
@click.option(
    "--unit",
    "units",
    multiple=True,
    metavar="UNIT",
    help="Include whether this systemd unit is enabled and active (repeatable).",
)
def probe(
    files: tuple[str, ...],
    globs: tuple[str, ...],
    fmt: str,
    health: bool,
    packages: tuple[str, ...],
    units: tuple[str, ...],
) -> None:
    """Print NVML's view of this host (driver, GPUs, MIG instances) as gpuprov.probe/v1 JSON.

    Exits 0 even without a driver: the document says why NVML is unavailable.
    """
    argv = [f"--file={path}" for path in files] + [f"--glob={pattern}" for pattern in globs]
    argv += ["--health"] if health else []
    argv += [f"--package={name}" for name in packages] + [f"--unit={unit}" for unit in units]
    sys.exit(host_probe.main([*argv, f"--format={fmt}"]))
