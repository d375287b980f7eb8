"""The `lab` session fixture: three SSH hosts with simulated GPUs, started once, downed at the end.

Every test marked ``@pytest.mark.lab`` may use it; the lab starts with the first such test and
is taken down when the session ends. Tests marked ``lab_fresh`` (they need the hosts as `up`
left them, before any deploy) run before the other lab tests and undo what they change; tests
marked ``lab_down`` run last: they take the lab down themselves. Needs root (CI runs as root).

    def test_kubelet_runs(lab):
        assert lab.testinfra("lab-a100-01").service("kubelet").is_running
"""

from __future__ import annotations

import warnings

import pytest
from gpuprov_lab.testing import Lab, UserLabUp


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "lab_fresh: needs the lab hosts as `up` left them; runs before other lab tests"
    )
    config.addinivalue_line("markers", "lab_down: takes the shared lab down; runs last")
    config.addinivalue_line("markers", "fleet: starts a 16-host lab of its own (minutes)")
    config.addinivalue_line(
        "markers", "own_lab: replaces the shared lab with one of its own; runs after lab_down"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable sort: fresh-host tests first, then the rest, and the tests that end the shared lab
    # after every other test of the session.
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("own_lab"):
            return 3  # takes the shared lab down for a lab of its own: after the lab_down tests
        if item.get_closest_marker("lab_down"):
            return 2
        return 0 if item.get_closest_marker("lab_fresh") else 1

    items.sort(key=rank)


@pytest.fixture(scope="session")
def lab() -> Lab:
    try:
        started = Lab.start(hosts=3)
    except UserLabUp as e:
        pytest.skip(str(e))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def deployed(lab: Lab):
    """The lab brought to its own plan (inventories/lab.py) before the module's tests."""
    return lab.deploy()


@pytest.fixture(scope="module", autouse=True)
def _cluster_as_found(request: pytest.FixtureRequest):
    """After each module on the shared lab, the cluster as the module found it: a module whose
    set-up failed half-way (its own clean-up never ran) must not leave pods, namespaces or a
    cordoned node to the modules after it. What had to be removed is reported as a warning."""
    module = request.node
    if not module.get_closest_marker("lab") or any(
        module.get_closest_marker(m) for m in ("lab_down", "own_lab", "fleet")
    ):
        yield
        return
    lab = request.getfixturevalue("lab")
    before = set(lab.namespaces()) if lab.kube else set()
    yield
    if lab.kube and lab.run_dir.read_state():
        left = lab.clear_workloads(keep=before)
        if left:
            warnings.warn(f"{module.name} left {', '.join(left)} (removed)", stacklevel=1)
