"""What the containerd drop-in restates, from the files as the host shows them (no binary
needed; tests/test_containerd_binaries.py runs the results through containerd 1.6 and 2.3)."""

from __future__ import annotations

import base64

import pytest
import tomlkit

from gpuprov.core.hostfiles import containerd as hostfile
from gpuprov.core.hostfiles.documents import parse

MAIN = "/etc/containerd/config.toml"
V16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
CRI = '[plugins."io.containerd.grpc.v1.cri"'
KUBEADM = (
    f'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n{CRI}]\n'
    '  sandbox_image = "registry.k8s.io/pause:3.10"\n'
    f"{CRI}.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
)


def state(imported: dict[str, bytes], runc_options: dict | None = None) -> dict:
    """A containerd 1.6 host's state: the files its dump imports and runc as it runs."""
    runc = {"runtime_type": "io.containerd.runc.v2", "options": runc_options or {}}
    dump = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"runc": runc}}}}}
    lines = [f"{p}\t{base64.b64encode(t).decode()}" for p, t in imported.items()]
    return {
        "version": {"ok": True, "text": V16},
        "source": {"ok": True, "text": tomlkit.dumps(dump)},
        "imports": {"ok": True, "text": "\n".join(lines)},
    }


def cri(drop_in: str) -> dict:
    return parse("toml", drop_in)["plugins"]["io.containerd.grpc.v1.cri"]


def test_the_drop_in_restates_the_main_files_cri_table_and_nothing_it_leaves_unset():
    _, drop_in = hostfile.render_files(MAIN, KUBEADM, state({}, {"SystemdCgroup": True}), True)

    table = cri(drop_in)
    assert table["sandbox_image"] == "registry.k8s.io/pause:3.10"
    assert "enable_unprivileged_ports" not in table
    runtimes = table["containerd"]["runtimes"]
    assert runtimes["runc"] == {"options": {"SystemdCgroup": True}}
    assert runtimes["nvidia"]["options"] == {
        "SystemdCgroup": True,
        "BinaryName": "/usr/bin/nvidia-container-runtime",
    }


def test_a_later_drop_in_with_a_cri_table_is_the_one_restated():
    later = f'version = 2\n{CRI}.registry]\n  config_path = "/etc/containerd/certs.d"\n'
    imported = {"/etc/containerd/conf.d/10-registry.toml": later.encode()}

    _, drop_in = hostfile.render_files(MAIN, KUBEADM, state(imported), False)

    assert set(cri(drop_in)) == {"registry", "containerd"}
    assert cri(drop_in)["containerd"]["runtimes"]["runc"] == {
        "runtime_type": "io.containerd.runc.v2"
    }


def test_runcs_zero_valued_running_options_are_not_copied_to_its_twin():
    running = {"SystemdCgroup": False, "BinaryName": "", "IoUid": 0, "Root": "/run/x"}

    _, drop_in = hostfile.render_files(MAIN, None, state({}, running), True)

    assert cri(drop_in)["containerd"]["runtimes"]["nvidia"]["options"] == {
        "Root": "/run/x",
        "BinaryName": "/usr/bin/nvidia-container-runtime",
    }


@pytest.mark.parametrize(
    "data,why",
    [(b"version = [\n", "unparsable TOML"), (b"\xff\xfe", "not UTF-8 text")],
    ids=["toml", "utf8"],
)
def test_a_loaded_file_gpuprov_cannot_read_is_refused_naming_it(data, why):
    path = "/etc/containerd/conf.d/10-bad.toml"
    with pytest.raises(hostfile.Refused) as refused:
        hostfile.render_files(MAIN, KUBEADM, state({path: data}), True)
    assert str(refused.value).startswith(f"{MAIN}: containerd imports {path}, {why}")


def test_a_file_containerd_does_not_load_is_not_read():
    beside = {"/etc/containerd/other.toml": b"version = [\n"}  # matched by no import
    _, drop_in = hostfile.render_files(MAIN, KUBEADM, state(beside), True)
    assert cri(drop_in)["sandbox_image"] == "registry.k8s.io/pause:3.10"


def test_a_relative_import_gpuprov_was_not_shown_is_refused_naming_it():
    main = KUBEADM.replace('imports = ["', 'imports = ["extra.toml", "')
    with pytest.raises(hostfile.Refused, match="containerd imports /etc/containerd/extra.toml"):
        hostfile.render_files(MAIN, main, state({}), True)
