"""Round trips of the driver's managed files (issue #9 item 3): what the deploy writes, fed to
verify's check, gives no finding; changing one field gives exactly that field's finding."""

from __future__ import annotations

import pytest

from gpuprov.controller.inventory import load
from gpuprov.core.hostfiles import apt_preferences, apt_source, nouveau_blacklist
from gpuprov.core.plan import build
from gpuprov.host.contract import (
    APT_PIN_PATH,
    DRIVER_REPO,
    NOUVEAU_BLACKLIST_PATH,
    OS_RELEASE_PATH,
    TOOLKIT_REPO,
)

ARMORED = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ0lab\n-----END PGP PUBLIC KEY BLOCK-----\n"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'


def plan_for(tmp_path, **data):
    data = {"gpu_model": "A100-80GB", "gpu_count": 2, "driver_version": "535.261.03", **data}
    directory = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    (directory / "inv.py").write_text(f"whole_card = [('n1', {data!r})]\n")
    return build(load(str(directory / "inv.py"))).host("n1")


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "lab.asc"
    path.write_text(ARMORED)
    return str(path)


def written(plan, distribution="debian") -> dict[str, str | None]:
    """Every file the deploy would write for ``plan``, by path, as the probe reads it back."""
    files: dict[str, str | None] = {OS_RELEASE_PATH: DEBIAN}
    for repo in apt_source.repositories(plan):
        files[repo.source_path] = apt_source.render(repo)
        if repo.keyring_path:
            files[repo.keyring_path] = repo.key_data().decode()
    files[APT_PIN_PATH] = apt_preferences.render(plan, distribution)
    if nouveau_blacklist.wanted(plan):
        files[NOUVEAU_BLACKLIST_PATH] = nouveau_blacklist.render(plan)
    return files


def findings(plan, files):
    return (
        apt_source.check(plan, files)
        + apt_preferences.check(plan, files)
        + nouveau_blacklist.check(plan, files)
    )


PLANS = {
    "host sources, debian default": {},
    "driver and toolkit repositories, flat": {
        "driver_repo_url": "http://10.200.0.1:13180/cuda/",
        "container_toolkit_version": "1.17.8-1",
        "container_toolkit_repo_url": "http://10.200.0.1:13180/libnvidia-container/",
    },
    "real archive suite and components": {
        "driver_repo_url": "http://deb.debian.org/debian",
        "driver_repo_suite": "bookworm-backports",
        "driver_repo_components": ["non-free", "non-free-firmware"],
        "driver_version": "535.216.03",
    },
    "named cuda-ubuntu source, 590+": {
        "driver_source": "cuda-ubuntu",
        "driver_version": "590.48.01",
    },
    "toolkit only": {"driver_version": None, "container_toolkit_version": "1.17.8"},
}


@pytest.mark.parametrize("data", PLANS.values(), ids=PLANS.keys())
def test_what_the_deploy_writes_verify_accepts(tmp_path, key, data):
    data = {**data, **{k.replace("_url", "_key"): key for k in data if k.endswith("_repo_url")}}
    plan = plan_for(tmp_path, **data)
    assert findings(plan, written(plan)) == []


def one_finding(plan, files):
    found = findings(plan, files)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("URIs", "http://elsewhere/cuda/"),
        ("Suites", "bookworm"),
        ("Components", "main"),
        ("Signed-By", "/usr/share/keyrings/other.gpg"),
        ("Types", "deb-src"),
    ],
)
def test_one_changed_source_field_is_one_finding_naming_it(tmp_path, key, field, value):
    plan = plan_for(
        tmp_path,
        driver_repo_url="http://10.200.0.1:13180/cuda/",
        driver_repo_key=key,
    )
    files = written(plan)
    path = apt_source.Repository(DRIVER_REPO, "", "", ()).source_path
    lines = [ln for ln in files[path].splitlines() if not ln.startswith(f"{field}:")]
    files[path] = "\n".join(lines + [f"{field}: {value}"]) + "\n"
    finding = one_finding(plan, files)
    assert (finding.check, finding.found) == ("apt-source", f"{field}: {value}")


def test_a_replaced_keyring_is_one_finding(tmp_path, key):
    plan = plan_for(tmp_path, driver_repo_url="http://r/", driver_repo_key=key)
    files = written(plan)
    files[f"/etc/apt/keyrings/{DRIVER_REPO}.asc"] = ARMORED.replace("lab", "other")
    assert one_finding(plan, files).check == "apt-keyring"


def test_a_missing_toolkit_source_is_one_finding(tmp_path, key):
    plan = plan_for(
        tmp_path,
        container_toolkit_version="1.17.8-1",
        container_toolkit_repo_url="http://r/t/",
        container_toolkit_repo_key=key,
    )
    files = written(plan)
    files[apt_source.Repository(TOOLKIT_REPO, "", "", ()).source_path] = None
    assert (one_finding(plan, files).check, one_finding(plan, files).found) == (
        "apt-source",
        "missing",
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Pin: version 535.261.03-*", "Pin: version 535.216.03-*"),
        ("Pin-Priority: 1001", "Pin-Priority: 500"),
        ("Package: src:nvidia-graphics-drivers", "Package: nvidia-driver"),
    ],
)
def test_one_changed_pin_field_is_one_finding(tmp_path, old, new):
    plan = plan_for(tmp_path)
    files = written(plan)
    files[APT_PIN_PATH] = files[APT_PIN_PATH].replace(old, new)
    finding = one_finding(plan, files)
    assert finding.check == "apt-pin" and new.split(": ", 1)[1] in finding.found


def test_the_pin_follows_the_host_distribution_when_no_source_is_named(tmp_path):
    plan = plan_for(tmp_path)
    files = written(plan)
    files[OS_RELEASE_PATH] = "ID=ubuntu\n"
    finding = one_finding(plan, files)
    assert "src:nvidia-graphics-drivers-535-server" in finding.expected


def test_a_pin_file_without_a_managed_driver_or_toolkit_is_a_finding(tmp_path):
    plan = plan_for(tmp_path, driver_version=None)
    assert apt_preferences.render(plan, "debian") is None
    finding = one_finding(plan, {APT_PIN_PATH: "Package: x\nPin: version 1\nPin-Priority: 1\n"})
    assert finding.found == "present"


@pytest.mark.parametrize("line", nouveau_blacklist.LINES)
def test_one_missing_blacklist_line_is_one_finding(tmp_path, line):
    plan = plan_for(tmp_path)
    files = written(plan)
    files[NOUVEAU_BLACKLIST_PATH] = files[NOUVEAU_BLACKLIST_PATH].replace(line, "")
    assert one_finding(plan, files).found == f"no line `{line}`"


def test_no_driver_means_no_blacklist_wanted(tmp_path):
    plan = plan_for(tmp_path, driver_version=None)
    assert nouveau_blacklist.paths(plan).files == ()
    assert nouveau_blacklist.check(plan, {}) == []
