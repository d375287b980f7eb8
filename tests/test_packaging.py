"""Package source profiles against recorded excerpts of the real repositories' `Packages`
indexes (tests/data/packages, each file with its source URL and date)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from gpuprov.core.packaging import versions
from gpuprov.core.packaging.profiles import (
    ProfileError,
    driver_packages,
    every_driver_name,
    parse,
    profile,
    profiles,
    replaced,
    select,
)
from gpuprov.core.packaging.resolve import resolve, toolkit

DATA = Path(__file__).parent / "data" / "packages"


def index(*names: str) -> dict[str, list[str]]:
    """Package -> every version in the recorded excerpts ``names`` (like `apt-cache madison`)."""
    out: dict[str, list[str]] = defaultdict(list)
    for name in names:
        text = "\n".join(
            line for line in (DATA / name).read_text().splitlines() if not line.startswith("#")
        )
        for stanza in text.strip().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
            out[fields["Package"]].append(fields["Version"])
    return dict(out)


DEBIAN = (
    "debian-bookworm-non-free.Packages",
    "debian-bookworm-non-free-firmware.Packages",
    "debian-bookworm-contrib.Packages",
    "debian-bookworm-backports-non-free.Packages",
    "debian-bookworm-backports-non-free-firmware.Packages",
)


@pytest.mark.parametrize(
    ("planned", "expected"),
    [("535.261.03", "535.261.03-1"), ("535.216.03", "535.216.03-2~bpo12+1")],
)
def test_debian_bookworm_and_backports_resolve_to_their_own_spellings(planned, expected):
    wanted = driver_packages(profile("debian-nonfree"), planned)
    result = resolve(wanted, planned, index(*DEBIAN))
    assert result.missing == {}
    assert {result.versions[n] for n in wanted.exact} == {expected}
    # nvidia-persistenced is its own source in contrib, at its own version.
    assert result.versions["nvidia-persistenced"] == "535.171.04-1~deb12u1"


def test_debian_lacks_a_version_and_says_which_it_has():
    wanted = driver_packages(profile("debian-nonfree"), "535.183.01")
    problem = resolve(wanted, "535.183.01", index(*DEBIAN)).problem("driver")
    assert problem == (
        "driver 535.183.01 is not in this host's apt sources: nvidia-driver has "
        "535.261.03-1, 535.216.03-2~bpo12+1 (and 4 more packages)"
    )


def test_bookworm_is_newer_than_backports_by_dpkg_order():
    assert versions.compare("535.261.03-1", "535.216.03-2~bpo12+1") > 0
    assert versions.newest_first(index(*DEBIAN)["nvidia-driver"])[0] == "535.261.03-1"


def test_debian_has_no_fabric_manager():
    with pytest.raises(ProfileError, match="does not package the NVIDIA fabric manager"):
        driver_packages(profile("debian-nonfree"), "535.261.03", fabric_manager=True)


@pytest.mark.parametrize(
    ("planned", "nvml"),
    [
        ("535.309.01", "libnvidia-compute-535-server"),
        ("580.173.02", "libnvidia-compute-580-server"),
        ("595.71.05", "libnvidia-compute-595-server"),
    ],
)
def test_ubuntu_archive_keeps_the_branch_in_names_past_590(planned, nvml):
    wanted = driver_packages(profile("ubuntu-archive"), planned, fabric_manager=True)
    assert nvml in wanted.exact
    assert f"nvidia-fabricmanager-{planned.split('.')[0]}" in wanted.exact
    found = index("ubuntu-noble-updates.Packages")
    assert versions.pick(planned, found[nvml], wanted.revision) == f"{planned}-0ubuntu0.24.04.1"


def test_ubuntu_archive_refuses_a_debian_spelled_version():
    wanted = driver_packages(profile("ubuntu-archive"), "535.309.01")
    assert versions.pick("535.309.01", ["535.309.01-1"], wanted.revision) is None


def test_cuda_ubuntu_590_and_later_drop_the_branch_and_lock_it_with_a_pinning_package():
    before = driver_packages(profile("cuda-ubuntu"), "580.95.05", fabric_manager=True)
    after = driver_packages(profile("cuda-ubuntu"), "610.43.02", fabric_manager=True)
    assert "libnvidia-compute-580" in before.exact and "nvidia-dkms-580-open" in before.exact
    assert before.own == ()
    assert after.exact == (
        "nvidia-dkms-open",
        "nvidia-utils",
        "libnvidia-compute",
        "nvidia-compute-utils",
        "nvidia-fabricmanager",
    )
    assert after.own == ("nvidia-driver-pinning-610",)
    result = resolve(after, "610.43.02", index("cuda-ubuntu2404.Packages"))
    assert result.missing == {}
    assert result.versions["nvidia-dkms-open"] == "610.43.02-1ubuntu1"
    assert result.versions["nvidia-driver-pinning-610"] == "610-2ubuntu1"


def test_cuda_debian_spells_versions_with_revision_1():
    wanted = driver_packages(profile("cuda-debian"), "580.105.08")
    assert versions.pick("580.105.08", ["580.105.08-1"], wanted.revision) == "580.105.08-1"
    # Debian's own archive spells the same upstream version differently: not this source's.
    assert versions.pick("535.261.03", ["535.261.03-0ubuntu1"], wanted.revision) is None


def test_toolkit_upstream_or_exact_version_resolves_the_four_packages():
    found = index("libnvidia-container-stable.Packages")
    for planned in ("1.17.8", "1.17.8-1"):
        result = toolkit(planned, found)
        assert result.missing == {}
        assert set(result.versions.values()) == {"1.17.8-1"}
    assert "1.18.0 is not in this host's apt sources" in toolkit("1.18.0", found).problem(
        "container toolkit"
    )


def test_host_distribution_chooses_the_default_source():
    assert select(None, "debian").name == "debian-nonfree"
    assert select(None, "ubuntu").name == "ubuntu-archive"
    assert select("cuda-debian", "debian").name == "cuda-debian"
    with pytest.raises(ProfileError, match="no default package source for distribution 'rhel'"):
        select(None, "rhel")
    with pytest.raises(ProfileError, match="driver_source 'nvidia' is not a known"):
        select("nvidia", "debian")


def test_the_host_reports_on_every_source_s_names_before_its_source_is_known():
    names = every_driver_name("535.261.03")
    assert {"nvidia-driver", "nvidia-driver-535-server", "libnvidia-compute-535"} <= set(names)


def test_every_profile_cites_where_its_facts_come_from():
    assert set(profiles()) == {"debian-nonfree", "ubuntu-archive", "cuda-ubuntu", "cuda-debian"}
    assert all(p.cites for p in profiles().values())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"x": {"title": "t"}}, "x: missing key 'eras'"),
        ({"x": {"title": "t", "eras": [], "colour": 1}}, "x: unknown key 'colour'"),
        (
            {
                "x": {
                    "title": "t",
                    "eras": [
                        {"from_branch": 0, "revision": "(", "driver": [], "nvml": "n", "pin": []}
                    ],
                }
            },
            "x: eras[0]: revision is not a regular expression",
        ),
    ],
)
def test_a_malformed_profile_names_the_key(document, message):
    with pytest.raises(ProfileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(document, "sources.yaml")


@pytest.mark.parametrize(
    ("a", "b", "sign"),
    [
        ("1.0~rc1-1", "1.0-1", -1),
        ("1.0-1", "1.0-1", 0),
        ("1:0.9-1", "2.0-1", 1),
        ("535.216.03-2~bpo12+1", "535.216.03-2", -1),
        ("1.0a-1", "1.0-1", 1),
        ("1.0-1ubuntu1", "1.0-1", 1),
        ("1.01-1", "1.1-1", 0),
    ],
)
def test_dpkg_version_order(a, b, sign):
    result = versions.compare(a, b)
    assert (result > 0) - (result < 0) == sign


def test_moving_to_590_on_cuda_ubuntu_replaces_the_branch_named_packages_and_back():
    source = profile("cuda-ubuntu")
    old_names = list(driver_packages(source, "580.95.05", fabric_manager=True).names)
    new = driver_packages(source, "590.48.01", fabric_manager=True)
    assert replaced(source, new, old_names + list(new.names)) == old_names
    # Back to 580: the branch-less 590 names go, and so does the 590 pinning package.
    old = driver_packages(source, "580.95.05", fabric_manager=True)
    assert replaced(source, old, list(new.names)) == list(new.names)


def test_debian_upgrades_in_place_and_keeps_what_the_plan_leaves_out():
    source = profile("debian-nonfree")
    wanted = driver_packages(source, "535.261.03", persistenced=False)
    assert replaced(source, wanted, [*wanted.names, "nvidia-persistenced"]) == []


def test_an_mps_host_gets_the_mps_binaries_at_the_driver_version_on_every_source():
    wanted = driver_packages(profile("debian-nonfree"), "535.261.03", mps=True)
    assert wanted.exact[-1] == "nvidia-cuda-mps"
    result = resolve(wanted, "535.261.03", index(*DEBIAN))
    assert result.missing == {} and result.versions["nvidia-cuda-mps"] == "535.261.03-1"
    assert "src:nvidia-graphics-drivers" in wanted.pin  # held at the driver's version too
    for source in ("ubuntu-archive", "cuda-ubuntu", "cuda-debian"):
        for version in ("535.261.03", "590.48.01"):
            assert (
                driver_packages(profile(source), version, mps=True)
                .exact[-1]
                .startswith(("nvidia-cuda-mps", "nvidia-compute-utils"))
            ), (source, version)
    assert "nvidia-cuda-mps" not in driver_packages(profile("debian-nonfree"), "535.261.03").exact
