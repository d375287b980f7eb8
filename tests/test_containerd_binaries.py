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
# What each containerd does not take: (binary, main file) -> the refusal's words.
REFUSED = {
    ("1.6", "v3"): "version 3 needs containerd 2.x",
    ("1.6", "v4"): "version 4 is not supported",
    ("2.3", "v4"): "version 4 is not supported",
}
BINARIES = {"1.6": debian_containerd, "2.3": upstream_containerd}
# The main files that set runc's SystemdCgroup and a sandbox image, and the one that sets
# containerd 2.x's `enable_unprivileged_*` (to false, 1.6's default; 2.x defaults them to true).
SYSTEMD_CGROUP = ("kubeadm", "kubespray", "v3", "v1")
SANDBOX_3_10 = ("kubeadm", "kubespray", "v3", "v1")
UNPRIVILEGED_FALSE = ("kubespray",)
# (host: the containerd the deploy reads the node with, reader: the one that runs the files):
# the same release, the upgrade (1.6 -> 2.3) and the way back. A main file a reader cannot read
# without gpuprov (v3 and v4 on 1.6) is no case for it.
CASES = [
    (host, reader, kind)
    for host in BINARIES
    for reader in BINARIES
    for kind in MAIN_FILES
    if (host, kind) in REFUSED or (reader, kind) not in REFUSED
]


def _drop_in(main: Path) -> str:
    return containerd_drop_in_path(str(main))


def _dump(binary: str, main: Path | None) -> dict:
    """``config dump`` of ``main`` (containerd's built-in config for None, as the state command
    reads a node without a main file)."""
    done = subprocess.run(
        [binary, "--config", str(main or "/dev/null"), "config", "dump"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return parse("toml", done.stdout)


def _release(binary: str) -> tuple[int, int, int]:
    found = hostfile.runtime_version(subprocess.check_output([binary, "--version"], text=True))
    assert found is not None
    return found


def _cri(effective: dict, release: tuple[int, ...]) -> dict:
    return dig(effective, "plugins", hostfile.dump_plugin(release))


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


def _deploy(main: Path, text: str | None, host: str, default: bool) -> None:
    """Write what the deploy renders for the main file ``text`` at ``main``, read with ``host``."""
    state = state_of(main, ["version", "source", "imports"], host)
    new_main, drop_in = hostfile.render_files(str(main), text, state, default)
    main.write_text(new_main)
    Path(_drop_in(main)).parent.mkdir(exist_ok=True)
    Path(_drop_in(main)).write_text(drop_in)


@pytest.mark.parametrize("default", [True, False], ids=["nvidia-default", "runc-default"])
@pytest.mark.parametrize("host,reader,kind", CASES)
def test_either_release_runs_the_main_file_on_its_own_defaults_plus_runcs_twin(
    tmp_path, host, reader, kind, default
):
    """The files the deploy writes on a node read by ``host``, run by ``reader``: ``reader``'s
    effective config is what it makes of the main file alone, plus the nvidia runtime."""
    host_binary, reader_binary = BINARIES[host](), BINARIES[reader]()
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir()
    text = MAIN_FILES[kind]
    if text is not None:
        main.write_text(text)
    if (host, kind) in REFUSED:
        state = state_of(main, ["version", "source", "imports"], host_binary)
        with pytest.raises(hostfile.Refused) as refused:
            hostfile.render_files(str(main), text, state, default)
        assert str(refused.value).startswith(f"{main}: ")
        assert REFUSED[host, kind] in str(refused.value)
        assert "\n" not in str(refused.value)
        return
    alone = _dump(reader_binary, main if text is not None else None)

    _deploy(main, text, host_binary, default)
    effective = _dump(reader_binary, main)

    release = _release(reader_binary)
    assert hostfile.unexpected_changes(alone, effective, release, default) == []
    cri = _cri(effective, release)
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["BinaryName"] == NVIDIA_RUNTIME_BINARY
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    if kind in SYSTEMD_CGROUP:
        assert runtimes["runc"]["options"]["SystemdCgroup"] is True
        assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["default_runtime_name"] == ("nvidia" if default else "runc")
    if kind in SANDBOX_3_10:
        sandbox = cri.get("sandbox_image") or dig(
            effective, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"
        )
        assert sandbox == "registry.k8s.io/pause:3.10"
    if reader == "2.3":  # its own defaults where the main file sets nothing
        unprivileged = kind not in UNPRIVILEGED_FALSE
        assert cri["enable_unprivileged_ports"] is unprivileged
        assert cri["enable_unprivileged_icmp"] is unprivileged

    loaded, said = _cri_loads(reader_binary, main)
    assert loaded, said


def test_an_upgrade_no_longer_inherits_containerd_1_defaults(tmp_path):
    """The regression itself: what 1.6 defaults to is not in the drop-in, so 2.3 reading the
    files deployed on 1.6 gets 2.3's defaults, not 1.6's."""
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir()
    main.write_text(KUBEADM)
    _deploy(main, KUBEADM, debian_containerd(), True)

    drop_in = parse("toml", Path(_drop_in(main)).read_text())
    cri = drop_in["plugins"]["io.containerd.grpc.v1.cri"]
    assert set(cri) == {"sandbox_image", "containerd"}
    assert set(cri["containerd"]) == {"snapshotter", "runtimes", "default_runtime_name"}
    effective = _cri(_dump(upstream_containerd(), main), (2, 3, 4))
    assert effective["enable_unprivileged_ports"] is True
    assert effective["enable_unprivileged_icmp"] is True
    assert _cri(_dump(debian_containerd(), main), (1, 6, 20))["enable_unprivileged_ports"] is False


def _node_with_drop_ins(tmp_path: Path) -> Path:
    """A kubeadm main file importing ``extra.toml`` (beside it) and ``conf.d/*.toml``, where
    other tools put CRI settings: containerd loads extra.toml (a sandbox image, a registry
    mirror), 10- (another mirror), 50- (a sandbox image and runc's SystemdCgroup), then
    gpuprov's 99-; 1.6 takes its CRI table from 50-, the last of them."""
    main = tmp_path / "containerd" / "config.toml"
    conf_d = main.parent / "conf.d"
    conf_d.mkdir(parents=True)
    main.write_text(
        KUBEADM.replace(
            "version = 2\n", f'version = 2\nimports = ["extra.toml", "{conf_d}/*.toml"]\n'
        ).replace("SystemdCgroup = true", "SystemdCgroup = false")
    )
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    (main.parent / "extra.toml").write_text(
        f'version = 2\n{cri}]\n  sandbox_image = "pause:extra"\n'
        f'{cri}.registry]\n  config_path = "/extra"\n'
    )
    (conf_d / "10-mirror.toml").write_text(f'version = 2\n{cri}.registry]\n  config_path = "/x"\n')
    (conf_d / "50-pause.toml").write_text(
        f'version = 2\n{cri}]\n  sandbox_image = "pause:50"\n'
        f"{cri}.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
    )
    return main


@pytest.mark.parametrize("reader", list(BINARIES))
@pytest.mark.parametrize("host", list(BINARIES))
def test_other_drop_ins_with_cri_settings_keep_what_each_release_makes_of_them(
    tmp_path, host, reader
):
    main = _node_with_drop_ins(tmp_path)
    reader_binary = BINARIES[reader]()
    alone = _dump(reader_binary, main)
    text = main.read_text()

    _deploy(main, text, BINARIES[host](), True)
    effective = _dump(reader_binary, main)

    release = _release(reader_binary)
    assert hostfile.unexpected_changes(alone, effective, release, True) == []
    cri = _cri(effective, release)
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    if reader == "1.6":  # 50-'s table alone: the main file's snapshotter and every mirror lost
        assert cri["sandbox_image"] == "pause:50"
        assert cri["containerd"]["snapshotter"] == "overlayfs"
        assert cri["registry"]["config_path"] == ""
    else:  # 2.3 merges them all, key by key, in the same order
        images = dig(effective, "plugins", "io.containerd.cri.v1.images")
        assert images["pinned_images"]["sandbox"] == "pause:50"
        assert images["snapshotter"] == "native"
        assert images["registry"]["config_path"] == "/x"


def test_the_imports_section_holds_the_files_containerd_loads(tmp_path):
    main = _node_with_drop_ins(tmp_path)
    (main.parent / "conf.d" / "10-mirror.toml").write_text(
        'version = 2\nimports = ["../late.toml"]\n'
    )
    (main.parent / "late.toml").write_text("version = 2\n")
    drop_in = Path(_drop_in(main))
    drop_in.write_text("version = 2\n")
    names = ["extra.toml", "conf.d/10-mirror.toml", "conf.d/50-pause.toml", "late.toml"]
    for release, binary in BINARIES.items():
        state = state_of(main, ["source", "imports"], binary())
        texts = hostfile.imported_texts(state["imports"])
        # 1.x lists the files it loaded (the main file too), 2.x its import patterns, as
        # written (late.toml relative to conf.d/): both found.
        expected = names + (["config.toml"] if release == "1.6" else [])
        assert set(texts) == {str(main.parent / n) for n in expected} | {str(drop_in)}, release
        assert all(texts[str(main.parent / n)] == (main.parent / n).read_text() for n in expected)
        parsed = {p: parse("toml", t) for p, t in texts.items()}
        parsed[str(main)] = parse("toml", main.read_text())
        order = [str(main)] + [str(main.parent / n) for n in names[:3]] + [str(drop_in)]
        assert hostfile.load_order(str(main), parsed) == order + [str(main.parent / "late.toml")]


def test_a_drop_in_loaded_after_gpuprovs_is_named_by_the_proof(tmp_path):
    """containerd 1.6 loads a file that a drop-in imports after every drop-in (breadth first),
    so its CRI table replaces gpuprov's: the candidate lacks the nvidia runtime, and the proof
    says so before any swap."""
    binary = debian_containerd()
    main = _node_with_drop_ins(tmp_path)
    (main.parent / "conf.d" / "10-mirror.toml").write_text(
        'version = 2\nimports = ["../late.toml"]\n'
    )
    (main.parent / "late.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:late"\n'
    )
    alone = _dump(binary, main)
    assert _cri(alone, (1, 6, 20))["sandbox_image"] == "pause:late"
    _deploy(main, main.read_text(), binary, True)

    problems = hostfile.unexpected_changes(alone, _dump(binary, main), (1, 6, 20), True)

    assert problems[0] == "runtimes.nvidia: missing (expected runc's twin with NVIDIA's binary)"


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
    runc = hostfile.runc_runtime(containerd)
    twin = hostfile.nvidia_runtime({}, runc["options"])
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
    state = state_of(main, ["version", "source", "imports"], binary)
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
