"""Test helpers: a simulated host (``gpuprov.sim``) and pynvml pointed at it, then put back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pynvml
import pytest

from gpuprov.sim import state


def new_host(
    tmp_path: Path,
    model: str = "A100-80GB",
    count: int = 1,
    mig: Iterable[int] = (),
    seed: str = "test-host",
) -> str:
    """A state file for ``count`` GPUs of ``model``; GPUs in ``mig`` booted with MIG on."""
    path = str(tmp_path / "gpus.json")
    host = state.new_state(model, count, seed=seed)
    for index in mig:
        host["gpus"][index]["mig_current"] = host["gpus"][index]["mig_pending"] = True
    state.write_new(path, host)
    return path


def edit(path: str) -> contextlib.AbstractContextManager[state.State]:
    """Change the simulated hardware directly (what the lab's ``gpuprov-sim`` does)."""
    return state.transaction(path)


def isolate_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo ``gpuprov.sim.install`` after the test: no library, empty function cache."""
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})


@contextlib.contextmanager
def initialized() -> Iterator[None]:
    pynvml.nvmlInit()
    try:
        yield
    finally:
        pynvml.nvmlShutdown()
