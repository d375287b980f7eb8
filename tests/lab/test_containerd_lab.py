"""containerd on lab hosts that look like kubeadm nodes, end to end: Debian's 1.6 on one host,
upstream 2.3.4 on another (``../shared/bin/containerd.xz``; without it only the 1.6 host runs).

Deploy, then containerd itself shows the CRI plugin loaded, the main file's sandbox image and
runc's ``SystemdCgroup`` unchanged and the nvidia runtime as runc's twin; verify exits 0; a
second deploy changes nothing. Each host's deployed files, read here by 1.6.20 and by 2.3.4
alike, keep the main file's settings and leave the rest to that release's defaults (what an
upgrade, or a downgrade, of containerd under gpuprov's files runs with). A main file the deploy cannot merge is refused before anything
is replaced or restarted; ``imports`` removed by hand is a finding the next deploy repairs; a
non-default ``containerd_config_path`` deploys and verifies too.

Runs its own two-host lab (taken down at the end), so it is marked ``lab_down``.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import tarfile

import pytest
import tomlkit
from gpuprov_lab.spec import default_spec
from gpuprov_lab.testing import Lab, UserLabUp

from gpuprov.core.hostfiles import containerd as hostfile
from gpuprov.core.hostfiles.documents import dig, parse
from tests.containerd_binaries import (
    HOW_TO,
    UPSTREAM_XZ,
    debian_containerd,
    dump_as_at,
    upstream_containerd,
)

pytestmark = [pytest.mark.lab, pytest.mark.lab_down, pytest.mark.own_lab]

MAIN = "/etc/containerd/config.toml"
DEBIAN, UPSTREAM = "lab-a100-01", "lab-h100-01"


@pytest.fixture(scope="module")
def lab():
    spec = default_spec(2)
    if UPSTREAM_XZ.exists():
        spec[1] = dataclasses.replace(spec[1], containerd=upstream_containerd())
    else:
        spec = spec[:1]
    try:
        Lab.make_way()  # the shared lab a test started; never a lab a person started
    except UserLabUp as e:
        pytest.skip(str(e))
    started = Lab.start(spec=spec)
    try:
        yield started
    finally:
        started.stop()


def dump(lab: Lab, host: str, path: str = MAIN) -> dict:
    return parse("toml", lab.run(host, f"containerd --config {path} config dump").stdout)


def cri(effective: dict) -> dict:
    """The CRI runtime settings, wherever this release dumps them."""
    return (
        dig(effective, "plugins", "io.containerd.grpc.v1.cri")
        if ("containerd" in (dig(effective, "plugins", "io.containerd.grpc.v1.cri") or {}))
        else dig(effective, "plugins", "io.containerd.cri.v1.runtime")
    )


def sandbox(effective: dict) -> str:
    return dig(effective, "plugins", "io.containerd.grpc.v1.cri", "sandbox_image") or dig(
        effective, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"
    )


def state(lab: Lab, host: str) -> tuple[str, str]:
    """containerd's main pid and the sha1 of the files gpuprov manages."""
    pid = lab.run(host, "systemctl show -p MainPID --value containerd").stdout.strip()
    sums = lab.run(host, f"sha1sum {MAIN} /etc/containerd/conf.d/* 2>/dev/null", check=False)
    return pid, sums.stdout


def test_the_upstream_host_runs_containerd_2(lab):
    if UPSTREAM not in lab.names:
        pytest.skip(f"only the containerd 1.6 host runs: {HOW_TO}")
    assert "v2.3.4" in lab.run(UPSTREAM, "containerd --version").stdout
    assert "1.6.20" in lab.run(DEBIAN, "containerd --version").stdout


def test_deploy_keeps_the_nodes_settings_and_adds_runcs_twin(lab):
    hosts = lab.names
    before = {h: dump(lab, h) for h in hosts}
    lab.deploy()
    for host in hosts:
        after = dump(lab, host)
        assert sandbox(after) == sandbox(before[host]) == "registry.k8s.io/pause:3.10", host
        runtimes = cri(after)["containerd"]["runtimes"]
        assert runtimes["runc"]["options"]["SystemdCgroup"] is True, host
        assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True, host
        assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
        assert cri(after)["containerd"]["default_runtime_name"] == "nvidia", host
        listed = lab.run(host, "ctr plugins ls").stdout
        assert any(
            line.split()[:2] == ["io.containerd.grpc.v1", "cri"] and line.split()[-1] == "ok"
            for line in listed.splitlines()
        ), listed
    assert set(lab.verify_status().values()) == {"ok"}, lab.verify().stdout


def deployed_files(lab: Lab, host: str, into) -> None:
    """``/etc/containerd`` of ``host`` as the deploy left it, copied into the directory ``into``."""
    packed = lab.run(host, "tar -C /etc/containerd -cf - . | base64 -w0").stdout
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(packed))) as archive:
        archive.extractall(into, filter="data")


@pytest.mark.parametrize("reader", ["1.6", "2.3"])
def test_each_hosts_deployed_files_keep_the_main_file_on_either_release(lab, tmp_path, reader):
    """The proof for an upgrade (a 1.6 host's files run by 2.3.4) and a downgrade (a 2.3 host's
    files run by 1.6.20): against the same files without gpuprov's drop-in, only the nvidia
    runtime changes, the main file's settings hold, and what it leaves unset is the reader's
    default (2.x: unprivileged ports and ICMP allowed; 1.6: not)."""
    binary = {"1.6": debian_containerd, "2.3": upstream_containerd}[reader]()
    release = (1, 6, 20) if reader == "1.6" else (2, 3, 4)
    lab.deploy()
    for host in lab.names:
        files = tmp_path / host
        deployed_files(lab, host, files)
        with_drop_in = dump_as_at(binary, files)
        (files / "conf.d" / "99-nvidia.toml").unlink()
        without = dump_as_at(binary, files)

        assert hostfile.unexpected_changes(without, with_drop_in, release, True) == [], host
        assert sandbox(with_drop_in) == "registry.k8s.io/pause:3.10", host
        runtimes = cri(with_drop_in)["containerd"]["runtimes"]
        assert runtimes["runc"]["options"]["SystemdCgroup"] is True, host
        assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True, host
        assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
        assert cri(with_drop_in)["containerd"]["default_runtime_name"] == "nvidia", host
        unprivileged = reader == "2.3"
        assert cri(with_drop_in)["enable_unprivileged_ports"] is unprivileged, host
        assert cri(with_drop_in)["enable_unprivileged_icmp"] is unprivileged, host


def test_a_second_deploy_changes_nothing(lab):
    lab.deploy()
    before = {h: state(lab, h) for h in lab.names}
    lab.deploy()
    assert {h: state(lab, h) for h in lab.names} == before


def test_imports_removed_by_hand_is_named_and_the_next_deploy_restores_it(lab):
    host = lab.names[0]
    lab.deploy()
    lab.run(host, f"sed -i 's/^imports/# imports/' {MAIN}")
    result = lab.verify(None, "--format", "json")
    assert result.returncode == 1
    [report] = [h for h in json.loads(result.stdout)["hosts"] if h["name"] == host]
    assert any(
        f"{MAIN} imports /etc/containerd/conf.d/*.toml" == f["expected"] and MAIN in f["found"]
        for f in report["findings"]
    ), report
    lab.deploy()
    assert set(lab.verify_status().values()) == {"ok"}


def test_a_main_file_the_deploy_cannot_merge_is_refused_before_any_change(lab):
    lab.deploy()
    for host in lab.names:
        original = lab.run(host, f"cat {MAIN}").stdout
        lab.run(host, f"sed -i 's/^version = 2/version = 4/' {MAIN}")
        before = state(lab, host)
        result = lab.deploy(check=False)
        assert result.returncode != 0
        said = result.stdout + result.stderr
        assert f"{MAIN}: containerd config version 4 is not supported" in said, said[-3000:]
        assert host in said
        assert state(lab, host) == before
        lab.run(host, f"cat > {MAIN} <<'EOF'\n{original}EOF")


def test_cri_failing_after_the_swap_puts_the_previous_files_back(lab):
    lab.deploy()
    drop_in = "/etc/containerd/conf.d/99-nvidia.toml"
    original = lab.run(DEBIAN, f"cat {MAIN}").stdout
    # containerd 1.6 fails its CRI plugin on a snapshotter it does not have; the running
    # containerd still has the old config, so only the restart after the swap shows it.
    lab.run(DEBIAN, f'sed -i \'s/snapshotter = "native"/snapshotter = "zzz"/\' {MAIN}')
    edited = lab.run(DEBIAN, f"cat {MAIN} {drop_in}").stdout
    result = lab.deploy(check=False)
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{MAIN}: containerd's CRI plugin did not load with the new config" in said, said[-3000:]
    assert "the previous files are back" in said
    assert lab.run(DEBIAN, f"cat {MAIN} {drop_in}").stdout == edited
    assert lab.run(DEBIAN, "systemctl is-active containerd").stdout.strip() == "active"
    lab.run(DEBIAN, f"cat > {MAIN} <<'EOF'\n{original}EOF")
    lab.deploy()
    assert set(lab.verify_status().values()) == {"ok"}


def test_a_non_default_config_path_deploys_and_verifies(lab, tmp_path):
    path = "/opt/k8s/containerd/config.toml"
    for host in lab.names:
        lab.run(host, f"mkdir -p /opt/k8s/containerd && cp /etc/containerd/config.toml {path}")
        lab.run(host, f"sed -i '/^imports/d' {path}")
    inventory = lab.inventory_copy(
        tmp_path, group_data_code=f"\ncontainerd_config_path = {path!r}\n"
    )
    lab.deploy(inventory)
    for host in lab.names:
        text = lab.run(host, f"cat {path}").stdout
        assert tomlkit.parse(text)["imports"] == ["/opt/k8s/containerd/conf.d/*.toml"]
        lab.run(host, "test -f /opt/k8s/containerd/conf.d/99-nvidia.toml")
    result = lab.verify(inventory)
    assert result.returncode == 0, result.stdout + result.stderr
