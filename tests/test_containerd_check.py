"""Verify's containerd check: what the deploy renders, read back, has no finding; each field
changed gives exactly that field's finding; a main file that lost its ``imports`` is named."""

from __future__ import annotations

import copy
import os

import pytest
import tomlkit

from gpuprov.controller.inventory import load
from gpuprov.core.hostfiles import containerd as hostfile
from gpuprov.core.hostfiles.documents import deep_merge, dig, parse
from gpuprov.core.plan import build
from tests.containerd_binaries import (
    debian_containerd,
    node_main,
    running_containerd,
    state_of,
    upstream_containerd,
    write_rendered,
)

V16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
V23 = "containerd github.com/containerd/containerd/v2 v2.3.4 db8809540e1a"
CRI_ROWS = {
    V16: "TYPE ID PLATFORMS STATUS\nio.containerd.grpc.v1 cri linux/amd64 ok",
    V23: "TYPE ID PLATFORMS STATUS\nio.containerd.cri.v1 images - ok\n"
    "io.containerd.cri.v1 runtime linux/amd64 ok\nio.containerd.grpc.v1 cri - ok",
}


def runc_table(plugin: str) -> str:
    """A main file's runc with ``SystemdCgroup`` (kubeadm's), under ``plugin``."""
    return (
        f"[plugins.{plugin}.containerd.runtimes.runc]\n"
        '  runtime_type = "io.containerd.runc.v2"\n'
        f"  [plugins.{plugin}.containerd.runtimes.runc.options]\n"
        "    SystemdCgroup = true\n"
    )


def plan_for(tmp_path, **data):
    data = {"gpu_model": "A100-80GB", "gpu_count": 2, **data}
    directory = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    (directory / "inv.py").write_text(f"whole_card = [('n1', {data!r})]\n")
    return build(load(str(directory / "inv.py"))).host("n1")


def source_dump(release: str, main_text: str | None) -> dict:
    """The config a node with ``main_text`` runs, as that release dumps it (cut to runc)."""
    plugin = hostfile.dump_plugin(hostfile.runtime_version(release))
    systemd = "SystemdCgroup = true" in (main_text or "")
    runc = {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": systemd}}
    return {
        "version": 2 if release == V16 else 3,
        "plugins": {
            plugin: {"containerd": {"default_runtime_name": "runc", "runtimes": {"runc": runc}}}
        },
    }


def effective(source: dict, drop_in: str, release: str) -> dict:
    """How that release merges the drop-in: 1.6 replaces the CRI table with it, 2.3 merges it
    key by key (tests/test_containerd_binaries.py runs the real ones)."""
    found = hostfile.runtime_version(release)
    plugins = parse("toml", drop_in)["plugins"]
    [section] = plugins.values()
    out = copy.deepcopy(source)
    if found < (2,):
        out["plugins"][hostfile.dump_plugin(found)] = section
        return out
    return deep_merge(out, {"plugins": {hostfile.dump_plugin(found): section}})


CASES = [
    (
        V16,
        "/etc/containerd/config.toml",
        "version = 2\n" + runc_table('"io.containerd.grpc.v1.cri"'),
    ),
    (V16, "/opt/k8s/containerd/config.toml", "version = 2\n"),
    (V16, "/etc/containerd/config.toml", None),
    (V16, "/etc/containerd/config.toml", '[plugins.cri]\n  sandbox_image = "pause:3.10"\n'),
    (V16, "/etc/containerd/config.toml", runc_table("cri")),
    (
        V23,
        "/etc/containerd/config.toml",
        "version = 3\n" + runc_table("'io.containerd.cri.v1.runtime'"),
    ),
    (V23, "/opt/k8s/containerd/config.toml", "version = 2\n"),
]


def rendered(tmp_path, release, path, main_text, default):
    plan = plan_for(tmp_path, containerd_config_path=path, container_runtime_default=default)
    source = source_dump(release, main_text)
    state = {
        "version": {"ok": True, "text": release},
        "source": {"ok": True, "text": tomlkit.dumps(source)},
    }
    main, drop_in = hostfile.render(plan, main_text, state)
    dump = effective(source, drop_in, release)
    observed = {
        "version": state["version"],
        "dump": {"ok": True, "text": tomlkit.dumps(dump)},
        "plugins": {"ok": True, "text": CRI_ROWS[release]},
    }
    return plan, {path: main}, observed


def findings(plan, files, observed):
    return [(f.check, f.expected, f.found) for f in hostfile.check(plan, files, observed)]


@pytest.mark.parametrize("default", [True, False])
@pytest.mark.parametrize("release,path,main_text", CASES)
def test_what_the_deploy_renders_checks_clean(tmp_path, release, path, main_text, default):
    assert findings(*rendered(tmp_path, release, path, main_text, default)) == []


def _mutate_dump(observed, release, change):
    dump = parse("toml", observed["dump"]["text"])
    containerd = dig(dump, "plugins", hostfile.dump_plugin(hostfile.runtime_version(release)))
    change(containerd["containerd"])
    observed["dump"]["text"] = tomlkit.dumps(dump)


FIELD_CHANGES = {
    "runtimes.nvidia.runtime_type": lambda c: c["runtimes"]["nvidia"].update(
        runtime_type="io.containerd.runsc.v1"
    ),
    "runtimes.nvidia.options.BinaryName": lambda c: c["runtimes"]["nvidia"]["options"].update(
        BinaryName="/usr/sbin/runc"
    ),
    # The cgroup driver runc does not use (kubelet and runtime must agree, nvidia-docker#1788).
    "runtimes.nvidia.options.SystemdCgroup": lambda c: c["runtimes"]["nvidia"]["options"].update(
        SystemdCgroup=not dig(c, "runtimes", "runc", "options", "SystemdCgroup")
    ),
    "default_runtime_name": lambda c: c.update(default_runtime_name="runc"),
    "runtimes.nvidia": lambda c: c["runtimes"].pop("nvidia"),
}


@pytest.mark.parametrize("field", list(FIELD_CHANGES))
@pytest.mark.parametrize("release,path,main_text", CASES)
def test_each_field_changed_is_exactly_that_finding(tmp_path, release, path, main_text, field):
    plan, files, observed = rendered(tmp_path, release, path, main_text, True)
    _mutate_dump(observed, release, FIELD_CHANGES[field])
    [(check, expected, found)] = findings(plan, files, observed)
    assert check == "container-runtime"
    assert expected.startswith(field)
    assert path in found


@pytest.mark.parametrize("release,path,main_text", CASES)
def test_imports_dropped_behind_gpuprovs_back_is_named(tmp_path, release, path, main_text):
    plan, files, observed = rendered(tmp_path, release, path, main_text, True)
    files[path] = files[path].replace("imports", "# imports")
    [finding] = hostfile.check(plan, files, observed)
    assert finding.host == "n1"
    assert finding.expected == f"{path} imports {path.rsplit('/', 1)[0]}/conf.d/*.toml"
    assert path in finding.found and "kubespray#12277" in finding.hint


def test_cri_plugin_not_loaded_is_a_finding(tmp_path):
    plan, files, observed = rendered(tmp_path, V23, *CASES[4][1:], True)
    observed["plugins"]["text"] = CRI_ROWS[V23].replace("runtime linux/amd64 ok", "runtime - error")
    [(_, expected, found)] = findings(plan, files, observed)
    assert expected == "CRI plugin loaded (ctr plugins ls)"
    assert "io.containerd.cri.v1 runtime: error" in found


@pytest.mark.parametrize("text", ["version = 4\n", "version = [\n", "imports = 3\n"])
def test_a_main_file_gpuprov_cannot_extend_is_one_finding_naming_it(tmp_path, text):
    plan, files, observed = rendered(tmp_path, *CASES[0], True)
    files["/etc/containerd/config.toml"] = text
    [finding] = hostfile.check(plan, files, observed)
    assert finding.found.startswith("/etc/containerd/config.toml: ")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare -m")
@pytest.mark.parametrize("release", ["1.6", "2.3"])
def test_running_containerd_read_back_checks_clean_until_imports_go(tmp_path, release):
    binary = {"1.6": debian_containerd, "2.3": upstream_containerd}[release]()
    main = node_main(tmp_path / "containerd")
    plan = plan_for(tmp_path, containerd_config_path=str(main))
    write_rendered(main, default=True, binary=binary)
    with running_containerd(binary, main):
        observed = state_of(main, ["version", "dump", "plugins"], binary)
        assert findings(plan, {str(main): main.read_text()}, observed) == []

        main.write_text(main.read_text().replace("imports", "# imports"))
        observed = state_of(main, ["version", "dump", "plugins"], binary)
        found = findings(plan, {str(main): main.read_text()}, observed)
    assert [f[1].split(" ", 1)[0] for f in found] == [str(main), "runtimes.nvidia"]
