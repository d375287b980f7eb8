"""The facts' shell commands, run for real here (sh + coreutils + dpkg), parsed by the facts."""

from __future__ import annotations

import hashlib
import subprocess

from gpuprov.controller.facts.files import FileStates
from gpuprov.controller.facts.managed import ManagedState
from gpuprov.controller.facts.packages import PackageStates
from gpuprov.controller.facts.units import UnitStates
from gpuprov.host import packages as dpkg
from gpuprov.host import units as systemd_units


def run(command: str) -> list[str]:
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_file_states_reports_mode_sha1_and_text_with_tabs_and_quotes(tmp_path):
    text = 'name = "it\'s"\n\tindented\n'
    path = tmp_path / "odd name's.toml"
    path.write_text(text)
    path.chmod(0o640)
    missing = tmp_path / "missing.conf"
    fact = FileStates()
    states = fact.process(run(fact.command([str(path), str(missing)], read=[str(path)])))
    assert states[str(missing)] is None
    assert states[str(path)]["mode"] == "640"
    assert states[str(path)]["sha1"] == hashlib.sha1(text.encode()).hexdigest()
    assert states[str(path)]["text"] == text


def test_file_states_reads_no_text_unless_asked(tmp_path):
    path = tmp_path / "agent.pyz"
    path.write_bytes(b"\x00\x01binary")
    fact = FileStates()
    assert fact.process(run(fact.command([str(path)])))[str(path)]["text"] is None


def test_package_states_knows_an_installed_package_and_skips_an_unknown_one():
    fact = PackageStates()
    states = fact.process(run(fact.command(["dpkg", "gpuprov-no-such-package"])))
    assert states["dpkg"]["version"]
    assert "gpuprov-no-such-package" not in states


def test_snapshot_sections_line_up(tmp_path):
    path = tmp_path / "a.conf"
    path.write_text("x\n")
    fact = ManagedState()
    snapshot = fact.process(
        run(fact.command([str(path)], read=[str(path)], packages=["gpuprov-no-such-package"]))
    )
    assert snapshot["files"][str(path)]["text"] == "x\n"
    assert snapshot["packages"] == {}
    assert snapshot["units"] == {}


def test_the_probe_reads_packages_and_units_with_the_deploys_own_commands():
    fact = PackageStates()
    states = fact.process(run(fact.command(["dpkg", "gpuprov-no-such-package"])))
    assert dpkg.read(["dpkg", "gpuprov-no-such-package"]) == {
        "dpkg": {"version": states["dpkg"]["version"], "held": states["dpkg"]["held"]}
    }
    units = UnitStates()
    expected = units.process(run(units.command(["gpuprov-no-such.service"])))
    assert systemd_units.read(["gpuprov-no-such.service"]) == expected
    assert expected == {"gpuprov-no-such.service": {"enabled": "", "active": ""}}
