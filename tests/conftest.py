"""Every test's agent runs keep their bytecode cache in a temporary directory, not /var/cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _agent_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GPUPROV_AGENT_CACHE", str(tmp_path_factory.mktemp("agent-cache")))
