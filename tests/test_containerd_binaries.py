"""The drop-in and main file the deploy renders, run through the real containerd binaries.

For every kind of main file a node may have, and with nvidia the default runtime or not, the
host's own containerd (Debian's 1.6.20; upstream 2.3.4 from ../shared/bin) reads the result:
its ``config dump`` keeps every setting of the main file, the nvidia runtime is runc's twin with
NVIDIA's binary, and a short containerd start in a private mount namespace loads the CRI plugin.
Needs root (``unshare -m``), as the lab does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import tomlkit

from gpuprov.controller.operations.containerd import candidate_dump_command, candidate_path
from gpuprov.controller.operations.files import temp_path
from gpuprov.core.hostfiles import containerd as hostfile
from gpuprov.core.hostfiles.documents import dig, parse
from gpuprov.host.contract import NVIDIA_RUNTIME_BINARY, containerd_drop_in_path
from tests.containerd_binaries import (
    debian_containerd,
    running_containerd,
    state_of,
    upstream_containerd,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare -m")

KUBEADM = """\
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""
# What Kubespray's containerd role renders (roles/container-engine/containerd/templates/
# config.toml.j2), less the base_runtime_spec file it also writes.
KUBESPRAY = """\
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0

[grpc]
  max_recv_message_size = 16777216
  max_send_message_size = 16777216

[debug]
  level = "info"

[metrics]
  address = ""
  grpc_histogram = false

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.10"
    max_container_log_line_size = 16384
    enable_unprivileged_ports = false
    enable_unprivileged_icmp = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "native"
      discard_unpacked_layers = true
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          runtime_engine = ""
          runtime_root = ""
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
            BinaryName = "/usr/sbin/runc"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
"""
V3 = """\
version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'native'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'registry.k8s.io/pause:3.10'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = true
"""
V1 = """\
[plugins.cri]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins.cri.containerd]
    snapshotter = "native"
    [plugins.cri.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.cri.containerd.runtimes.runc.options]
        SystemdCgroup = true
"""
DEBIAN = """\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""
MAIN_FILES = {
    "none": None,
    "debian": DEBIAN,
    "kubeadm": KUBEADM,
    "kubespray": KUBESPRAY,
    "v3": V3,
    "v1": V1,
    "v4": "version = 4\n",
}
# What each containerd does not run: (binary, main file) -> the refusal's words.
REFUSED = {
    ("1.6", "v3"): "version 3 needs containerd 2.x",
    ("1.6", "v4"): "version 4 is not supported",
    ("2.3", "v4"): "version 4 is not supported",
}
BINARIES = {"1.6": debian_containerd, "2.3": upstream_containerd}


def _drop_in(main: Path) -> str:
    return containerd_drop_in_path(str(main))


def _dump(binary: str, main: Path) -> dict:
    done = subprocess.run(
        [binary, "--config", str(main), "config", "dump"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return parse("toml", done.stdout)


def _cri_loads(binary: str, main: Path) -> tuple[bool, str]:
    """Start containerd on a copy of ``main`` with its own root, state and sockets (in a private
    mount namespace, stopped at the end) and read its CRI rows as verify does."""
    document = tomlkit.parse(main.read_text())
    work = main.parent
    document["root"], document["state"] = str(work / "root"), str(work / "state")
    for section in ("grpc", "ttrpc"):
        document.setdefault(section, tomlkit.table())["address"] = str(work / f"{section}.sock")
    start = work / "start.toml"
    start.write_text(tomlkit.dumps(document))
    with running_containerd(binary, start):
        plugins = state_of(start, ["dump", "plugins"], binary)["plugins"]["text"]
    return hostfile.cri_loaded(plugins)


@pytest.mark.parametrize("default", [True, False], ids=["nvidia-default", "runc-default"])
@pytest.mark.parametrize("kind", list(MAIN_FILES))
@pytest.mark.parametrize("release", list(BINARIES))
def test_effective_config_keeps_the_main_file_and_adds_runcs_twin(tmp_path, release, kind, default):
    binary = BINARIES[release]()
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir()
    if MAIN_FILES[kind] is not None:
        main.write_text(MAIN_FILES[kind])
    state = state_of(main, ["version", "source"], binary)
    if (release, kind) in REFUSED:
        with pytest.raises(hostfile.Refused) as refused:
            hostfile.render_files(str(main), MAIN_FILES[kind], state, default)
        assert str(refused.value).startswith(f"{main}: ")
        assert REFUSED[release, kind] in str(refused.value)
        assert "\n" not in str(refused.value)
        return

    new_main, drop_in = hostfile.render_files(str(main), MAIN_FILES[kind], state, default)
    source = parse("toml", state["source"]["text"])
    main.write_text(new_main)
    Path(_drop_in(main)).parent.mkdir(exist_ok=True)
    Path(_drop_in(main)).write_text(drop_in)
    effective = _dump(binary, main)

    found = hostfile.runtime_version(state["version"]["text"])
    assert hostfile.unexpected_changes(source, effective, found, default) == []
    containerd = dig(effective, "plugins", hostfile.dump_plugin(found), "containerd")
    nvidia = containerd["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == NVIDIA_RUNTIME_BINARY
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    runc_cgroup = dig(containerd, "runtimes", "runc", "options", "SystemdCgroup")
    assert dig(nvidia, "options", "SystemdCgroup") == runc_cgroup
    if kind in ("kubeadm", "kubespray", "v3", "v1"):
        assert runc_cgroup is True
    assert containerd["default_runtime_name"] == ("nvidia" if default else "runc")
    if kind in ("kubeadm", "kubespray", "v1"):
        cri = dig(effective, "plugins", hostfile.dump_plugin(found))
        sandbox = cri.get("sandbox_image") or dig(
            effective, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"
        )
        assert sandbox == "registry.k8s.io/pause:3.10"

    loaded, said = _cri_loads(binary, main)
    assert loaded, said


@pytest.mark.parametrize("release", list(BINARIES))
def test_the_source_dump_leaves_out_only_gpuprovs_drop_in(tmp_path, release):
    binary = BINARIES[release]()
    main = tmp_path / "containerd" / "config.toml"
    conf_d = main.parent / "conf.d"
    conf_d.mkdir(parents=True)
    main.write_text(
        KUBEADM.replace("version = 2\n", f'version = 2\nimports = ["{conf_d}/*.toml"]\n')
    )
    (conf_d / "10-mirror.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/x"\n'
    )
    Path(_drop_in(main)).write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        '  default_runtime_name = "nvidia"\n'
    )
    before = main.read_text(), Path(_drop_in(main)).read_text()

    state = state_of(main, ["source", "dump"], binary)

    source, effective = (parse("toml", state[s]["text"]) for s in ("source", "dump"))
    found = hostfile.runtime_version(subprocess.check_output([binary, "--version"], text=True))
    plugin = hostfile.dump_plugin(found)
    assert dig(source, "plugins", plugin, "containerd", "default_runtime_name") == "runc"
    assert dig(effective, "plugins", plugin, "containerd", "default_runtime_name") == "nvidia"
    registry = "io.containerd.grpc.v1.cri" if found < (2,) else "io.containerd.cri.v1.images"
    assert dig(source, "plugins", registry, "registry", "config_path") == "/x"
    assert (main.read_text(), Path(_drop_in(main)).read_text()) == before


def test_the_proof_names_what_a_key_level_drop_in_would_lose_on_containerd_1(tmp_path):
    binary = debian_containerd()
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir()
    main.write_text(KUBEADM)
    state = state_of(main, ["version", "source"], binary)
    source = parse("toml", state["source"]["text"])
    parsed = hostfile.read_main(str(main), KUBEADM)
    # What 2.1+ gets: only the changes. containerd 1.6 replaces the whole CRI table with it.
    containerd = dig(source, "plugins", "io.containerd.grpc.v1.cri", "containerd")
    twin = hostfile.nvidia_runtime(hostfile.runc_runtime(containerd), whole=False)
    changes = {"default_runtime_name": "nvidia", "runtimes": {"nvidia": twin}}
    drop_in = tomlkit.dumps(
        {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"containerd": changes}}}
    )
    main.write_text(hostfile.render_main(parsed, f"{main.parent}/conf.d/*.toml"))
    Path(_drop_in(main)).parent.mkdir()
    Path(_drop_in(main)).write_text(drop_in)

    problems = hostfile.unexpected_changes(source, _dump(binary, main), (1, 6, 20), True)

    named = "\n".join(problems)
    assert (
        'plugins."io.containerd.grpc.v1.cri".sandbox_image: "registry.k8s.io/pause:3.10"' in named
    )
    assert 'containerd.snapshotter: "native" -> "overlayfs"' in named
    assert "runtimes.runc.options.SystemdCgroup: true -> absent" in named, named


@pytest.mark.parametrize("release", list(BINARIES))
def test_the_candidates_are_dumped_in_place_without_touching_the_real_files(tmp_path, release):
    binary = BINARIES[release]()
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir()
    main.write_text(KUBEADM)
    state = state_of(main, ["version", "source"], binary)
    new_main, drop_in = hostfile.render_files(str(main), KUBEADM, state, False)
    # Where the operation uploads them before the proof.
    Path(temp_path(str(main))).write_text(new_main)
    Path(candidate_path(str(main))).write_text(drop_in)
    bindir = main.parent / "bin"
    done = subprocess.run(
        ["sh", "-c", candidate_dump_command(str(main))],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    source = parse("toml", state["source"]["text"])
    found = hostfile.runtime_version(state["version"]["text"])
    assert hostfile.unexpected_changes(source, parse("toml", done.stdout), found, False) == []
    assert main.read_text() == KUBEADM
    assert not Path(_drop_in(main)).parent.exists()
