"""An apt repository: its signing keyring and its deb822 source, then `apt-get update`."""

from __future__ import annotations

from pathlib import Path

from pyinfra.operations import server

from gpuprov.contract import APT_KEYRINGS_DIR, APT_SOURCES_DIR, FILE_MODE
from gpuprov.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.limits import APT_UPDATE
from gpuprov.operations.files import is_current
from gpuprov.operations.packages import source, source_text


def keyring_path(name: str, key: str) -> str:
    # apt reads an armored key only from a .asc file, a binary one from .gpg (sources.list(5)).
    armored = Path(key).expanduser().read_bytes().lstrip().startswith(b"-----BEGIN PGP")
    return f"{APT_KEYRINGS_DIR}/{name}.{'asc' if armored else 'gpg'}"


def watch(name: str, key: str | None) -> Watch:
    paths = [f"{APT_SOURCES_DIR}/{name}.sources"]
    if key:
        paths.append(keyring_path(name, key))
    return Watch(paths=tuple(paths))


def repository(
    view: HostView, name: str, url: str, suite: str, components: list[str], key: str | None
) -> None:
    """Keyring + source ``name``; `apt-get update` only when either changed."""
    keyring = keyring_path(name, key) if key else None
    key_op = None
    if key and keyring:
        key_op = ensure_file(
            view, f"apt keyring {keyring}", keyring, Path(key).expanduser().read_bytes()
        )
    dest = f"{APT_SOURCES_DIR}/{name}.sources"
    text = source_text(url, suite, components, keyring)
    source_op = None
    if dest not in view.files or not is_current(view.files[dest], text.encode(), FILE_MODE):
        source_op = source(
            name=f"apt source {dest}",
            filename=name,
            uris=url,
            suites=suite,
            components=components,
            signed_by=keyring,
        )
    if key_op or source_op:
        server.shell(
            name=f"apt-get update ({name})",
            commands=[APT_UPDATE],
            _if=changed(key_op, source_op),
            _timeout=view.settings["gpuprov_timeout_apt_update"],
        )
