"""What each distribution ships: gpuprov's wheel holds the product and nothing of its lab; the
gpuprov-lab wheel holds the lab, the simulated driver and its packages (issue #25 item 2)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What each build needs of the checkout.
PRODUCT = ("pyproject.toml", "README.md", "gpuprov", "templates")
LAB = ("pyproject.toml", "README.md", "gpuprov_lab")


def _wheel(source: Path, out: Path, parts: tuple[str, ...]) -> dict[str, bytes]:
    """Name -> content of each file in the wheel built from a copy of ``parts`` of ``source`` (a
    build in the checkout itself would leave setuptools' build/ and egg-info there)."""
    tree = out / "src"
    tree.mkdir()
    for part in parts:
        copy = shutil.copytree if (source / part).is_dir() else shutil.copy2
        copy(source / part, tree / part, **_ignore(copy))
    out = out / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(tree),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    archive = zipfile.ZipFile(wheel)
    return {name: archive.read(name) for name in archive.namelist()}


def _ignore(copy) -> dict:
    if copy is shutil.copytree:
        return {"ignore": shutil.ignore_patterns("__pycache__", "*.egg-info", "build")}
    return {}


@pytest.fixture(scope="module")
def product(tmp_path_factory) -> dict[str, bytes]:
    return _wheel(ROOT, tmp_path_factory.mktemp("gpuprov"), PRODUCT)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict[str, bytes]:
    return _wheel(ROOT / "lab", tmp_path_factory.mktemp("gpuprov-lab"), LAB)


def test_the_product_wheel_holds_no_lab_simulator_c_or_shell_file(product):
    code = [n for n in product if ".dist-info/" not in n]
    assert [n for n in code if not n.startswith("gpuprov/")] == []
    assert [n for n in code if n.endswith((".c", ".h", ".sh", ".so"))] == []
    assert [n for n in code if "lab" in n.split("/") or "sim" in n.split("/")] == []


def test_nothing_in_the_product_wheel_names_the_simulator(product):
    # The probe loads libnvidia-ml.so.1 through pynvml's own loader: no hook, no lab names.
    names = (b"GPUPROV_NVML_SIM", b"gpuprov_lab", b"nvidia-sim", b"gpuprov-sim", b"gpuprov.sim/")
    code = {n: data for n, data in product.items() if ".dist-info/" not in n}
    assert [(n, name) for n, data in code.items() for name in names if name in data] == []


def test_the_product_wheel_holds_every_module_and_data_file_of_the_product(product):
    wanted = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "gpuprov").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    wanted |= {f"gpuprov/templates/{p.name}" for p in (ROOT / "templates").iterdir() if p.is_file()}
    assert sorted(wanted - set(product)) == []


def test_the_product_installs_one_command_and_no_simulator(product):
    (points,) = [n for n in product if n.endswith(".dist-info/entry_points.txt")]
    assert b"gpuprov-sim" not in product[points] and b"gpuprov =" in product[points]


def test_the_lab_wheel_holds_the_lab_the_simulated_driver_and_its_packages(lab):
    code = {n for n in lab if ".dist-info/" not in n}
    assert [n for n in code if not n.startswith("gpuprov_lab/")] == []
    wanted = {
        p.relative_to(ROOT / "lab").as_posix()
        for p in (ROOT / "lab" / "gpuprov_lab").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sorted(wanted - code) == []
