"""Names Kubernetes would refuse are refused by `gpuprov kube render|apply` and the planner
(issue #26): namespaces (RFC 1123 labels), node names (RFC 1123 subdomains, whether
``kube_node_name`` or the host name standing for it), taints repeating a key and effect, and a
``{mode}`` label or taint value too long for the host's own mode. Each is exit 2 with one line
naming file, host and key (or the option), and nothing is rendered."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.core.kube_names import label_problem, subdomain_problem
from inventories import write_inventory

T4 = '"gpu_model": "T4", "gpu_count": 1'


def render(path, *args):
    return CliRunner().invoke(main, ["kube", "render", str(path), *args])


def one_error(result, *fragments) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


@pytest.mark.parametrize("option", ["--namespace", "--vgpu-namespace"])
@pytest.mark.parametrize(
    "name, said",
    [
        ("Bad_NS", "must be an RFC 1123 label"),
        ("", "must not be empty"),
        ("a" * 64, "must be at most 63 characters (an RFC 1123 label), not 64"),
        ("-gpu", "must be an RFC 1123 label"),
        ("gpu.operator", "must be an RFC 1123 label"),
    ],
)
def test_a_namespace_kubernetes_refuses_is_refused_naming_the_option(tmp_path, option, name, said):
    path = write_inventory(tmp_path, f'whole_card = (["n1"], {{{T4}}})\n')
    one_error(render(path, option, name), f"command line: {option}: a namespace {said}")


@pytest.mark.parametrize("host", ["gpu_01", "GPU-01", "gpu-01.", "n" * 254])
def test_a_host_name_that_is_no_node_name_needs_kube_node_name(tmp_path, host):
    path = write_inventory(tmp_path, f'whole_card = (["ok-1", {host!r}], {{{T4}}})\n')
    one_error(render(path), "kube_node_name:", "set kube_node_name to the host's Kubernetes node")
    named = write_inventory(
        tmp_path, f'whole_card = (["ok-1", ({host!r}, {{"kube_node_name": "gpu-01"}})], {{{T4}}})\n'
    )
    assert render(named).exit_code == 0


@pytest.mark.parametrize(
    "name, said",
    [
        ("a" * 254, "at most 253 characters"),
        ("gpu_01", "must be an RFC 1123 subdomain"),
        ("", "must be a non-empty string"),
    ],
)
def test_kube_node_name_must_be_a_node_name(tmp_path, name, said):
    path = write_inventory(
        tmp_path, f'whole_card = ([("n1", {{"kube_node_name": {name!r}}})], {{{T4}}})\n'
    )
    one_error(CliRunner().invoke(main, ["plan", str(path)]), "host n1", "kube_node_name:", said)
    assert subdomain_problem("a" * 253) is None and subdomain_problem("a.b-c.d") is None


def test_taints_repeating_a_key_and_effect_are_refused(tmp_path):
    path = write_inventory(
        tmp_path,
        f'whole_card = (["n1"], {{{T4}, "kube_node_taints": '
        '["dedicated=a:NoSchedule", "dedicated=b:NoSchedule", "dedicated=a:NoExecute"]})\n',
    )
    one_error(
        render(path),
        "host n1",
        "kube_node_taints: taints 'dedicated=a:NoSchedule' and 'dedicated=b:NoSchedule' have the "
        "same key and effect",
    )


@pytest.mark.parametrize(
    "key, value",
    [
        ("kube_node_labels", '{"team": "y" * 58 + "{mode}"}'),
        ("kube_node_taints", '["team=" + "y" * 58 + "{mode}:NoSchedule"]'),
    ],
)
def test_mode_is_filled_in_before_the_length_check_with_the_hosts_own_mode(tmp_path, key, value):
    # 58 + len("mig") = 61 fits a label value; 58 + len("whole_card") = 68 does not.
    path = write_inventory(
        tmp_path,
        f"""\
        mig = (["m1"], {{"gpu_model": "A30-24GB", "gpu_count": 1, "mig_layout": {{"4g.24gb": 1}},
                         "{key}": {value}}})
        whole_card = (["w1"], {{{T4}, "{key}": {value}}})
        """,
    )
    line = one_error(render(path), "host w1", f"{key}:", "in whole_card) must be at most 63")
    assert "m1" not in line
    fits = write_inventory(
        tmp_path,
        f'mig = (["m1"], {{"gpu_model": "A30-24GB", "gpu_count": 1, "mig_layout": {{"4g.24gb": 1}}, "{key}": {value}}})\n',
    )
    assert render(fits).exit_code == 0


def test_the_name_rules():
    assert label_problem("nvidia-device-plugin") is None
    assert label_problem("a" * 63) is None
    assert "63" in label_problem("a" * 64)
