"""The driver deploy's decisions from one host state: which source, which packages, whether
the planned versions exist (pre-flight), what a change disturbs and what it replaces."""

from __future__ import annotations

import hashlib

from gpuprov.controller.deploys import driver, versions
from gpuprov.controller.deploys.view import HostView
from gpuprov.controller.inventory import load
from gpuprov.core.plan import build
from gpuprov.host.contract import DRIVER_REPO, OS_RELEASE_PATH, apt_source_path

DEBIAN = "ID=debian\nVERSION_CODENAME=bookworm\n"
BOOKWORM, BACKPORTS = "535.261.03-1", "535.216.03-2~bpo12+1"
DEBIAN_NAMES = (
    "nvidia-driver",
    "nvidia-kernel-dkms",
    "nvidia-smi",
    "firmware-nvidia-gsp",
    "libnvidia-ml1",
)


def plan_for(tmp_path, **data):
    data = {"gpu_model": "A100-80GB", "gpu_count": 2, "driver_version": "535.216.03", **data}
    directory = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    (directory / "inv.py").write_text(f"whole_card = [('n1', {data!r})]\n")
    return build(load(str(directory / "inv.py"))).host("n1")


def text_file(text: str) -> dict:
    sha1 = hashlib.sha1(text.encode()).hexdigest()
    return {"mode": "644", "user": "root", "group": "root", "sha1": sha1, "text": text}


def debian_host(plan, installed: str | None = None, held: bool = True) -> HostView:
    """A Debian host whose apt sources have bookworm's and backports' driver."""
    packages = {
        name: {
            "version": installed,
            "held": held and bool(installed),
            "available": [BOOKWORM, BACKPORTS],
        }
        for name in DEBIAN_NAMES
    }
    packages["nvidia-persistenced"] = {
        "version": None,
        "held": False,
        "available": ["535.171.04-1~deb12u1"],
    }
    return HostView(plan, files={OS_RELEASE_PATH: text_file(DEBIAN)}, packages=packages)


def test_the_host_distribution_chooses_debian_non_free(tmp_path):
    view = debian_host(plan_for(tmp_path))
    chosen, wanted = driver.packages(view)
    assert chosen.name == "debian-nonfree"
    assert wanted.exact == DEBIAN_NAMES
    assert versions.problems(view) == []


def test_a_version_the_host_lacks_fails_preflight_naming_what_it_has(tmp_path):
    view = debian_host(plan_for(tmp_path, driver_version="535.183.01"))
    assert versions.problems(view) == [
        "driver 535.183.01 is not in this host's apt sources: nvidia-driver has "
        "535.261.03-1, 535.216.03-2~bpo12+1 (and 4 more packages)"
    ]


def test_a_toolkit_version_the_host_lacks_fails_preflight(tmp_path):
    view = debian_host(plan_for(tmp_path, container_toolkit_version="1.17.8"))
    view.packages["nvidia-container-toolkit"] = {
        "version": None,
        "held": False,
        "available": ["1.18.0-1"],
    }
    (problem,) = versions.problems(view)
    assert problem.startswith("container toolkit 1.17.8 is not in this host's apt sources: ")


def test_a_repository_this_run_adds_is_checked_when_the_install_runs(tmp_path):
    key = tmp_path / "k.asc"
    key.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    plan = plan_for(
        tmp_path, driver_version="535.183.01", driver_repo_url="http://r/", driver_repo_key=str(key)
    )
    view = debian_host(plan)
    view.files[apt_source_path(DRIVER_REPO)] = None
    assert versions.problems(view) == []


def test_debian_cannot_give_a_fabric_manager(tmp_path):
    view = debian_host(plan_for(tmp_path, driver_fabric_manager=True))
    (problem,) = versions.problems(view)
    assert "does not package the NVIDIA fabric manager" in problem


def test_no_default_source_for_an_unknown_distribution(tmp_path):
    view = debian_host(plan_for(tmp_path))
    view.files[OS_RELEASE_PATH] = text_file("ID=rhel\n")
    (problem,) = versions.problems(view)
    assert "no default package source for distribution 'rhel'" in problem


def test_first_install_is_not_disruptive_an_upgrade_is(tmp_path):
    plan = plan_for(tmp_path, driver_version="535.261.03")
    assert not driver.changes(debian_host(plan))
    assert driver.changes(debian_host(plan, installed=BACKPORTS))
    assert not driver.changes(debian_host(plan, installed=BOOKWORM))


def test_a_branch_change_on_ubuntu_replaces_the_old_branch(tmp_path):
    plan = plan_for(tmp_path, driver_version="550.127.05", driver_source="ubuntu-archive")
    view = HostView(
        plan,
        packages={
            "nvidia-driver-535-server": {
                "version": "535.183.01-0ubuntu0.22.04.1",
                "held": True,
                "available": [],
            },
            "nvidia-utils-535-server": {
                "version": "535.183.01-0ubuntu0.22.04.1",
                "held": True,
                "available": [],
            },
            "nvidia-driver-550-server": {
                "version": None,
                "held": False,
                "available": ["550.127.05-0ubuntu0.22.04.1"],
            },
        },
    )
    chosen, wanted = driver.packages(view)
    assert driver.removed(view, chosen, wanted) == [
        "nvidia-driver-535-server",
        "nvidia-utils-535-server",
    ]
    assert driver.changes(view)


def test_the_host_state_read_covers_every_source_until_os_release_chooses(tmp_path):
    watch = driver.watch(plan_for(tmp_path))
    assert OS_RELEASE_PATH in watch.read
    assert {"nvidia-driver", "nvidia-driver-535-server", "nvidia-driver-*-server"} <= set(
        watch.packages
    )
    named = driver.watch(plan_for(tmp_path, driver_source="debian-nonfree"))
    assert OS_RELEASE_PATH not in named.read
    assert "nvidia-driver-535-server" not in named.packages


def test_an_mps_host_installs_the_mps_binaries_with_the_driver_and_a_time_sliced_one_not(
    tmp_path,
):
    def shared(**data):
        data = {
            "gpu_model": "A100-80GB",
            "gpu_count": 2,
            "driver_version": "535.216.03",
            "time_slicing_replicas": 4,
            **data,
        }
        directory = tmp_path / f"shared-{len(list(tmp_path.iterdir()))}"
        directory.mkdir()
        (directory / "inv.py").write_text(f"shared = [('n1', {data!r})]\n")
        return build(load(str(directory / "inv.py"))).host("n1")

    _, wanted = driver.packages(debian_host(shared(sharing_strategy="mps")))
    assert wanted.exact == (*DEBIAN_NAMES, "nvidia-cuda-mps")
    assert "nvidia-cuda-mps" in driver.watch(shared(sharing_strategy="mps")).packages
    _, wanted = driver.packages(debian_host(shared()))
    assert wanted.exact == DEBIAN_NAMES
