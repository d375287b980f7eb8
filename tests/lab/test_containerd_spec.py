"""A lab host can run another containerd than Debian's: the spec's choice, the `--containerd`
binary, and what a host's root gets for it (no lab needed)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from gpuprov_lab import hosts
from gpuprov_lab.spec import default_spec, load_spec

from gpuprov.cli import main
from gpuprov.core.errors import InputError

SPEC = """\
- {group: shared, model: A100-80GB, count: 2}
- {group: mig, model: H100-80GB, count: 2, containerd: upstream}
"""


def test_spec_marks_which_hosts_run_the_given_binary(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    first, second = load_spec(str(path), "/opt/containerd-2.3.4")
    assert (first.containerd, second.containerd) == (None, "/opt/containerd-2.3.4")
    assert second.as_dict()["containerd"] == "/opt/containerd-2.3.4"


def test_upstream_without_a_binary_is_one_line_naming_spec_and_host(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    with pytest.raises(InputError) as error:
        load_spec(str(path))
    [problem] = error.value.problems
    assert str(path) in str(problem) and "host 2" in str(problem)
    assert "--containerd PATH" in str(problem)


def test_unknown_containerd_choice_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("- {group: shared, model: A100-80GB, count: 2, containerd: 2.3}\n")
    with pytest.raises(InputError, match="containerd must be debian or upstream"):
        load_spec(str(path), "/x")


def test_default_spec_runs_the_binary_on_every_host():
    assert {h.containerd for h in default_spec(3, "/opt/c")} == {"/opt/c"}
    assert {h.containerd for h in default_spec(3)} == {None}


def test_lab_up_needs_an_existing_binary(tmp_path):
    result = CliRunner().invoke(main, ["lab", "up", "--containerd", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_a_host_root_gets_the_binary_and_a_unit_that_runs_it(tmp_path):
    binary = tmp_path / "containerd"
    binary.write_bytes(b"\x7fELF-not-really")
    root = tmp_path / "root"
    hosts.install_containerd(root, binary)
    installed = root / "usr/local/bin/containerd"
    assert installed.read_bytes() == binary.read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o755
    unit = (root / "etc/systemd/system/containerd.service.d/gpuprov-lab.conf").read_text()
    assert unit.splitlines()[-1] == "ExecStart=/usr/local/bin/containerd"
