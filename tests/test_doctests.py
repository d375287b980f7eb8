"""Every docstring example of the gpuprov package and of the lab (gpuprov_lab) runs, as written,
and gives what it shows.

Importing a module runs nothing against a host: the edges (facts, operations, deploys) only
define pyinfra objects at import, so every module of both packages is collected here; only
``__main__`` modules, which run a command when imported, are left out.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import gpuprov_lab
import pytest

import gpuprov

MODULES = sorted(
    m.name
    for package in (gpuprov, gpuprov_lab)
    for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not m.name.endswith(".__main__")
)


def examples(module) -> list[doctest.DocTest]:
    return [t for t in doctest.DocTestFinder().find(module) if t.examples]


def failures(tests: list[doctest.DocTest]) -> list[str]:
    out: list[str] = []

    class Collect(doctest.DocTestRunner):
        def report_failure(self, _out, test, example, got):
            out.append(f"{test.name}: {example.source.strip()} gave {got.strip()!r}")

        def report_unexpected_exception(self, _out, test, example, exc_info):
            out.append(f"{test.name}: {example.source.strip()} raised {exc_info[1]!r}")

    runner = Collect(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test, out=lambda _text: None)
    return out


def test_the_package_has_examples_in_every_layer():
    layers = {
        name.split(".")[1]
        for name in MODULES
        if name.startswith("gpuprov.") and examples(importlib.import_module(name))
    }
    assert {"core", "host", "controller", "cli"} <= layers


def test_a_stale_example_is_a_failure():
    stale = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "stale", "stale.py", 0)
    assert failures([stale]) == ["stale: 1 + 1 gave '2'"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_give_what_they_show(name):
    assert failures(examples(importlib.import_module(name))) == []
