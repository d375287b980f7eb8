"""The example and lab inventories' queue objects as ``gpuprov kube render --queues`` writes
them, for the tests that give them to the real Kueue and Volcano."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuprov.cli import main

INVENTORIES = ("inventories/example.py", "inventories/lab.py")


def lab_inventory_readable(patch: pytest.MonkeyPatch, directory: Path) -> None:
    """inventories/lab.py plans without a lab up: its run directory holds the repository key
    the inventory names (with no lab.json it has the default three hosts)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "repo-key.asc").write_text("")
    patch.setenv("GPUPROV_LAB_DIR", str(directory))


def rendered(inventory: str, scheduler: str, out: Path) -> dict[str, list[dict]]:
    """File name -> documents of the queue files of ``inventory`` for ``scheduler``."""
    result = CliRunner().invoke(
        main, ["kube", "render", inventory, "--queues", scheduler, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    names = {"kueue": ["kueue-queues.yaml"]}.get(
        scheduler, ["volcano-queues.yaml", "volcano-scheduler-configmap.yaml"]
    )
    return {n: list(yaml.safe_load_all((out / n).read_text())) for n in names}


def apply(inventory: str, kubeconfig: Path, scheduler: str):
    return CliRunner().invoke(
        main, ["kube", "apply", inventory, "--kubeconfig", str(kubeconfig), "--queues", scheduler]
    )


def verify(inventory: str, kubeconfig: Path):
    """``gpuprov verify --cluster-only --format json``: the nodes and queues as the API server
    shows them."""
    return CliRunner().invoke(
        main,
        [
            "verify",
            inventory,
            "--kubeconfig",
            str(kubeconfig),
            "--cluster-only",
            "--format",
            "json",
        ],
    )
