"""The apt repositories gpuprov adds: per repository a deb822 source
(``/etc/apt/sources.list.d/<name>.sources``, sources.list(5)) and the keyring it is
``Signed-By`` (``/etc/apt/keyrings/<name>.asc`` or ``.gpg``).

The keyring is the controller's key file (``driver_repo_key``), copied as it is; apt reads an
armored key only from a ``.asc`` file and a binary one only from ``.gpg``, so the name follows
the content.

>>> repo = Repository("gpuprov-nvidia-driver", "http://repo.lan/cuda/", "/", ())
>>> print(render(repo), end="")
Types: deb
URIs: http://repo.lan/cuda/
Suites: /
>>> check_repository("gpu-1", repo, {repo.source_path: render(repo)})
[]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import Report
from gpuprov.host.contract import APT_KEYRINGS_DIR, DRIVER_REPO, TOOLKIT_REPO, apt_source_path

CHECK = "apt-source"
KEYRING_CHECK = "apt-keyring"
_FIELDS = ("Types", "URIs", "Suites", "Components", "Signed-By")


class KeyFileError(ValueError):
    """The controller's key file of a repository cannot be read."""


@dataclass(frozen=True)
class Repository:
    """One repository as the plan configures it."""

    name: str  # the source's and the keyring's file name (DRIVER_REPO, TOOLKIT_REPO)
    url: str
    suite: str
    components: tuple[str, ...]
    key: str | None = None  # the controller's key file

    @property
    def source_path(self) -> str:
        return apt_source_path(self.name)

    def key_data(self) -> bytes | None:
        if self.key is None:
            return None
        try:
            return Path(self.key).expanduser().read_bytes()
        except OSError as e:
            raise KeyFileError(
                f"{self.name}: cannot read its key {self.key}: {e.strerror}"
            ) from None

    @property
    def keyring_path(self) -> str | None:
        data = self.key_data()
        if data is None:
            return None
        armored = data.lstrip().startswith(b"-----BEGIN PGP")
        return f"{APT_KEYRINGS_DIR}/{self.name}.{'asc' if armored else 'gpg'}"


def repositories(plan: Any) -> list[Repository]:
    """The repositories ``plan`` (a HostPlan) adds: the driver's and the toolkit's, where each
    has a URL and its packages are managed."""
    driver, runtime = plan.driver, plan.runtime
    out = []
    if driver.driver_version and driver.driver_repo_url:
        out.append(
            Repository(
                DRIVER_REPO,
                driver.driver_repo_url,
                driver.driver_repo_suite,
                tuple(driver.driver_repo_components),
                driver.driver_repo_key,
            )
        )
    if runtime.container_toolkit_version and runtime.container_toolkit_repo_url:
        out.append(
            Repository(
                TOOLKIT_REPO,
                runtime.container_toolkit_repo_url,
                runtime.container_toolkit_repo_suite,
                tuple(runtime.container_toolkit_repo_components),
                runtime.container_toolkit_repo_key,
            )
        )
    return out


def repository(plan: Any, name: str) -> Repository | None:
    """The plan's repository ``name`` (DRIVER_REPO, TOOLKIT_REPO), if it adds one."""
    return next((r for r in repositories(plan) if r.name == name), None)


def paths(plan: Any) -> Wanted:
    """The planned sources and their keyrings."""
    out = []
    for repo in repositories(plan):
        out.append(repo.source_path)
        if repo.keyring_path:
            out.append(repo.keyring_path)
    return Wanted(files=tuple(out))


def fields(repo: Repository) -> dict[str, str]:
    """The deb822 fields of ``repo``'s source, in file order."""
    out = {"Types": "deb", "URIs": repo.url, "Suites": repo.suite}
    if repo.components:
        out["Components"] = " ".join(repo.components)
    if repo.keyring_path:
        out["Signed-By"] = repo.keyring_path
    return out


def render(repo: Repository) -> str:
    return "".join(f"{k}: {v}\n" for k, v in fields(repo).items())


def parse(text: str) -> dict[str, str]:
    """The first stanza of a deb822 file (continuation lines joined, comments dropped).

    >>> parse("# x\\nTypes: deb\\nURIs: http://a/\\n  http://b/\\n")
    {'Types': 'deb', 'URIs': 'http://a/ http://b/'}
    """
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if out:
                break
            continue
        if line[0] in " \t" and key:
            out[key] = f"{out[key]} {line.strip()}".strip()
            continue
        key, _, value = line.partition(":")
        key = key.strip()
        out[key] = value.strip()
    return out


def check(plan: Any, files: Mapping[str, str | None]) -> list[Finding]:
    findings = []
    for repo in repositories(plan):
        findings += check_repository(plan.name, repo, files)
    return findings


def check_repository(host: str, repo: Repository, files: Mapping[str, str | None]) -> list[Finding]:
    """One finding per deb822 field that differs, and one for the keyring."""
    report = Report(host)
    text = files.get(repo.source_path)
    if text is None:
        report.add(CHECK, repo.source_path, "missing", "run the deploy")
    else:
        found, want = parse(text), fields(repo)
        for field in _FIELDS:
            if " ".join(found.get(field, "").split()) != want.get(field, ""):
                report.add(
                    CHECK,
                    f"{field}: {want.get(field, '(none)')} in {repo.source_path}",
                    f"{field}: {found.get(field, '(none)')}",
                    "run the deploy (it rewrites the source)",
                )
    keyring = repo.keyring_path
    if keyring:
        have = files.get(keyring)
        data = repo.key_data() or b""
        armored = keyring.endswith(".asc")
        if have is None:
            report.add(KEYRING_CHECK, f"{keyring} from {repo.key}", "missing", "run the deploy")
        elif armored and have.strip() != data.decode(errors="replace").strip():
            report.add(
                KEYRING_CHECK,
                f"{keyring} from {repo.key}",
                "a different key",
                "run the deploy (it replaces the keyring)",
            )
    return report.findings
