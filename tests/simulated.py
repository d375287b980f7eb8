"""Test helpers: a simulated host (``gpuprov_lab.sim``) and pynvml pointed at it, then put back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pynvml
import pytest
from gpuprov_lab.sim import state


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
    """Undo ``gpuprov_lab.sim.install`` after the test: no library, empty function cache."""
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})


@contextlib.contextmanager
def initialized() -> Iterator[None]:
    pynvml.nvmlInit()
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


def carve(path: str, layouts: dict[int, list[tuple[int, list[int]]]]) -> None:
    """Create GPU and compute instances through the simulator's own rules, as the applier would.

    ``layouts`` maps a GPU index to ``(GI profile id, [CI profile constants])`` entries; the GPU
    must already have MIG on. pynvml is pointed back at whatever it used before.
    """
    saved, cache = pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache)
    pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache = None, {}
    from gpuprov_lab.sim import install

    install(path)
    try:
        with initialized():
            for index, instances in layouts.items():
                device = pynvml.nvmlDeviceGetHandleByIndex(index)
                for profile_id, ci_constants in instances:
                    gi = pynvml.nvmlDeviceCreateGpuInstance(device, profile_id)
                    for constant in ci_constants:
                        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, constant)
    finally:
        pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache = saved, cache
