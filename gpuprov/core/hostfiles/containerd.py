"""containerd: the main config's ``imports`` line and gpuprov's nvidia drop-in, written against
the configuration containerd actually runs, and checked on the configuration it actually runs.

What the deploy and verify read from the host (``gpuprov.host.containerd_state``):
``containerd --version``, ``config dump`` with gpuprov's drop-in left out (the *source*: the node
as it is without gpuprov), ``config dump`` as in effect, and the CRI rows of ``ctr plugins ls``.

How an imported file merges depends on the containerd release, not on the config version:

- containerd 1.x replaces a whole plugin table with the imported one (containerd/containerd#5837),
  so the drop-in carries the full CRI section of the source plus the nvidia changes, as
  ``nvidia-ctk runtime configure`` does;
- containerd 2.x merges plugin tables key by key (containerd/containerd#9982, merged for 2.0);
  NVIDIA's toolkit still treats releases before 2.1 as whole-table, and a full copy is right
  under both rules, so only 2.1 and later get the key-level drop-in.

The nvidia runtime is runc's twin: the default runc runtime's ``options`` (``SystemdCgroup`` on a
kubeadm node, NVIDIA/nvidia-docker#1788) plus ``runtime_type`` and ``options.BinaryName``.

>>> main = read_main("/etc/containerd/config.toml", "version = 2\\n")
>>> (main.version, main.plugin)
(2, 'io.containerd.grpc.v1.cri')
>>> render_main(main, "/etc/containerd/conf.d/*.toml")
'version = 2\\nimports = ["/etc/containerd/conf.d/*.toml"]\\n'
>>> runtime_version("containerd github.com/containerd/containerd/v2 v2.3.4 db8809540e1a")
(2, 3, 4)
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import tomlkit

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import ParseError, dig, parse, scalar
from gpuprov.host.contract import (
    CRI_PLUGIN,
    NVIDIA_RUNTIME,
    NVIDIA_RUNTIME_BINARY,
    NVIDIA_RUNTIME_TYPE,
    containerd_drop_in_glob,
    containerd_drop_in_path,
)

CHECK = "container-runtime"
RUNC = "runc"
# From this release on, imports merge key by key (see the module docstring).
KEY_MERGE_FROM = (2, 1)
# The CRI plugin id in `config dump`: containerd 1.x dumps version 2, 2.x dumps version 3 or 4,
# whose runtime settings sit in the same table as version 3's.
_DUMP_PLUGIN = {1: CRI_PLUGIN[2], 2: CRI_PLUGIN[3]}
# Keys of a dump that name what was read, not what runs.
_BOOKKEEPING = ("imports", "version")


class Refused(ValueError):
    """A host whose containerd config the deploy will not touch; the message names the file."""


@dataclass(frozen=True)
class MainFile:
    """containerd's main config as gpuprov reads it."""

    path: str
    text: str | None
    version: int  # 1, 2 or 3
    imports: tuple[str, ...] = ()
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def plugin(self) -> str:
        """The CRI plugin table of this config version."""
        return CRI_PLUGIN[self.version]


def paths(plan) -> Wanted:
    """What the probe reads for ``check``: the main file and the drop-ins."""
    main = plan.settings["containerd_config_path"]
    return Wanted(files=(main,), globs=(containerd_drop_in_glob(main),))


def read_main(path: str, text: str | None) -> MainFile:
    """The main config at ``path``; Refused for what gpuprov cannot extend safely.

    No file (or an empty one) is version 2, a non-empty file without ``version`` is version 1
    (containerd's own rule).

    >>> read_main("/etc/containerd/config.toml", "version = 4\\n")
    Traceback (most recent call last):
    ...
    gpuprov.core.hostfiles.containerd.Refused: /etc/containerd/config.toml: containerd config version 4 is not supported (1, 2 or 3)
    """
    if text is None or not text.strip():
        return MainFile(path, text, 2)
    try:
        document = parse("toml", text)
    except ParseError as e:
        raise Refused(f"{path}: {e}") from None
    version = document.get("version", 1)
    if version not in CRI_PLUGIN or isinstance(version, bool):
        raise Refused(
            f"{path}: containerd config version {scalar(version)} is not supported (1, 2 or 3)"
        )
    imports = document.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise Refused(f"{path}: imports must be a list of paths, got {scalar(imports)}")
    return MainFile(path, text, version, tuple(imports), document)


def runtime_version(text: str | None) -> tuple[int, int, int] | None:
    """The release in ``containerd --version`` output, None when it names none.

    >>> runtime_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1")
    (1, 6, 20)
    """
    words = (text or "").split()
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", words[2]) if len(words) > 2 else None
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def dump_plugin(release: tuple[int, ...]) -> str:
    """The CRI plugin id in this release's ``config dump``."""
    return _DUMP_PLUGIN[2 if release[0] >= 2 else 1]


def render_main(main: MainFile, pattern: str) -> str:
    """The main file with ``pattern`` in its ``imports`` (appended, never reordered); every other
    key, comment and blank line kept. An empty file becomes a ``version = 2`` file; a version 1
    file keeps having no ``version`` (adding one would change its meaning)."""
    document = tomlkit.parse(main.text or "")
    if not (main.text or "").strip():
        document.add("version", 2)
    imports = document.get("imports")
    if imports is None:
        document["imports"] = [pattern]
    elif pattern not in imports:
        imports.append(pattern)
    return tomlkit.dumps(document)


def runc_runtime(containerd: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime the nvidia runtime is cloned from: the default runtime when it is runc's
    shim (and not nvidia itself), else ``runc``; {} when there is none."""
    runtimes = containerd.get("runtimes") or {}
    default = containerd.get("default_runtime_name")
    chosen = runtimes.get(default) if default != NVIDIA_RUNTIME else None
    if not isinstance(chosen, Mapping) or chosen.get("runtime_type") != NVIDIA_RUNTIME_TYPE:
        chosen = runtimes.get(RUNC)
    return dict(chosen) if isinstance(chosen, Mapping) else {}


def nvidia_runtime(runc: Mapping[str, Any], whole: bool) -> dict[str, Any]:
    """runc's twin: its ``options`` (the whole table when ``whole``), runc's shim and NVIDIA's
    binary.

    >>> nvidia_runtime({"runtime_type": "io.containerd.runc.v2", "sandboxer": "podsandbox",
    ...                 "options": {"SystemdCgroup": True}}, whole=False)
    {'runtime_type': 'io.containerd.runc.v2', 'options': {'SystemdCgroup': True, 'BinaryName': '/usr/bin/nvidia-container-runtime'}}
    """
    out = copy.deepcopy(dict(runc)) if whole else {}
    options = copy.deepcopy(dict(runc.get("options") or {}))
    options["BinaryName"] = NVIDIA_RUNTIME_BINARY
    out["runtime_type"] = NVIDIA_RUNTIME_TYPE
    out["options"] = options
    return out


def render_drop_in(
    main: MainFile, release: tuple[int, ...], source: Mapping[str, Any], default: bool
) -> str:
    """The drop-in that makes the effective config = ``source`` + the nvidia runtime (+ the
    default runtime when ``default``) under ``release``'s merge rules.

    ``source`` is the parsed ``config dump`` of the host without gpuprov's drop-in.
    """
    cri = dig(source, "plugins", dump_plugin(release))
    containerd = dig(cri, "containerd")
    if not isinstance(containerd, Mapping):
        raise Refused(
            f"{main.path}: containerd {'.'.join(map(str, release))} shows no CRI plugin "
            f"section ({dump_plugin(release)}) in its config dump; is CRI disabled?"
        )
    whole = tuple(release[:2]) < KEY_MERGE_FROM
    twin = nvidia_runtime(runc_runtime(containerd), whole)
    if whole:
        section = copy.deepcopy(dict(cri))
        section["containerd"] = dict(section["containerd"])
        section["containerd"]["runtimes"] = {
            **(section["containerd"].get("runtimes") or {}),
            NVIDIA_RUNTIME: twin,
        }
    else:
        section = {"containerd": {"runtimes": {NVIDIA_RUNTIME: twin}}}
    if default:
        section["containerd"]["default_runtime_name"] = NVIDIA_RUNTIME
    document = tomlkit.document()
    document.add(tomlkit.comment("nvidia runtime for containerd, written by gpuprov."))
    document.add(tomlkit.comment(f"Imported by {main.path}; rewritten by every deploy."))
    if main.version != 1:  # no `version` is version 1; `version = 1` is refused by 2.x
        document.add("version", main.version)
    document.add("plugins", {main.plugin: section})
    return tomlkit.dumps(document)


def render(plan, main_text: str | None, state: Mapping[str, Any]) -> tuple[str, str]:
    """(main file, drop-in) the deploy writes for ``plan``, from the main file's text and the
    host's ``state`` (``version`` and ``source`` sections); Refused names the file and why."""
    settings = plan.settings
    return render_files(
        settings["containerd_config_path"],
        main_text,
        state,
        settings["container_runtime_default"],
    )


def render_files(
    path: str, main_text: str | None, state: Mapping[str, Any], default: bool
) -> tuple[str, str]:
    """``render`` for a main file at ``path``; ``default`` makes nvidia the default runtime."""
    main = read_main(path, main_text)
    version = state.get("version") or {}
    release = runtime_version(version.get("text")) if version.get("ok") else None
    if release is None:
        raise Refused(f"{path}: no containerd to read it with ({last_line(version.get('text'))})")
    if main.version == 3 and release < (2,):
        raise Refused(
            f"{path}: config version 3 needs containerd 2.x; "
            f"this host runs {'.'.join(map(str, release))}"
        )
    source = state.get("source") or {}
    if not source.get("ok"):
        raise Refused(f"{path}: containerd cannot read it: {last_line(source.get('text'))}")
    try:
        dumped = parse("toml", source["text"])
    except ParseError as e:
        raise Refused(f"{path}: containerd's config dump is not TOML: {e}") from None
    return render_main(main, containerd_drop_in_glob(path)), render_drop_in(
        main, release, dumped, default
    )


def runtime_problems(
    effective: Mapping[str, Any], release: tuple[int, ...], default: bool
) -> list[tuple[str, str, str]]:
    """(key, expected, found) for each way ``effective`` (a parsed dump) lacks the nvidia
    runtime as planned: runc's twin with NVIDIA's binary, and the default when planned."""
    containerd = dig(effective, "plugins", dump_plugin(release), "containerd")
    if not isinstance(containerd, Mapping):
        return [("CRI plugin section", dump_plugin(release), "missing")]
    nvidia = dig(containerd, "runtimes", NVIDIA_RUNTIME)
    if not isinstance(nvidia, Mapping):
        return [("runtimes.nvidia", "runc's twin with NVIDIA's binary", "missing")]
    problems = []
    want = nvidia_runtime(runc_runtime(containerd), whole=False)
    for key, value in [("runtime_type", want["runtime_type"])] + [
        (f"options.{k}", v) for k, v in want["options"].items()
    ]:
        got = dig(nvidia, *key.split("."))
        if got != value or type(got) is not type(value):
            shown = "unset" if got is None else scalar(got)
            problems.append((f"runtimes.nvidia.{key}", scalar(value), shown))
    got = containerd.get("default_runtime_name")
    if default and got != NVIDIA_RUNTIME:
        problems.append(("default_runtime_name", scalar(NVIDIA_RUNTIME), scalar(got)))
    return problems


def unexpected_changes(
    source: Mapping[str, Any],
    candidate: Mapping[str, Any],
    release: tuple[int, ...],
    default: bool,
) -> list[str]:
    """The dotted keys where the ``candidate`` dump differs from ``source`` other than by the
    planned nvidia changes, plus what the nvidia runtime lacks; [] when the candidate is safe.

    >>> src = {"plugins": {"io.containerd.grpc.v1.cri": {"sandbox_image": "pause:3.10",
    ...        "containerd": {"default_runtime_name": "runc", "runtimes": {"runc": {}}}}}}
    >>> cand = copy.deepcopy(src)
    >>> cand["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] = "pause:3.6"
    >>> unexpected_changes(src, cand, (1, 6, 20), default=False)[0]
    "runtimes.nvidia: missing (expected runc's twin with NVIDIA's binary)"
    """
    problems = [
        f"{key}: {found} (expected {expected})"
        for key, expected, found in runtime_problems(candidate, release, default)
    ]
    plugin = dump_plugin(release)
    expected = copy.deepcopy(dict(source))
    got = copy.deepcopy(dict(candidate))
    for document in (expected, got):
        for key in _BOOKKEEPING:
            document.pop(key, None)
        runtimes = dig(document, "plugins", plugin, "containerd", "runtimes")
        if isinstance(runtimes, dict):
            runtimes.pop(NVIDIA_RUNTIME, None)
    if default and isinstance(dig(expected, "plugins", plugin, "containerd"), dict):
        expected["plugins"][plugin]["containerd"]["default_runtime_name"] = NVIDIA_RUNTIME
    flat_expected, flat_got = _flatten(expected), _flatten(got)
    for key in sorted(set(flat_expected) | set(flat_got)):
        if flat_expected.get(key, _ABSENT) != flat_got.get(key, _ABSENT):
            before = flat_expected.get(key, _ABSENT)
            after = flat_got.get(key, _ABSENT)
            problems.append(f"{key}: {_shown(before)} -> {_shown(after)}")
    return problems


def cri_loaded(plugins: str) -> tuple[bool, str]:
    """(loaded, what ``ctr plugins ls`` said) from the CRI rows the state command kept.

    >>> cri_loaded("TYPE ID PLATFORMS STATUS\\nio.containerd.grpc.v1 cri linux/amd64 ok")
    (True, 'io.containerd.grpc.v1 cri: ok')
    """
    rows = [line.split() for line in plugins.splitlines()[1:] if line.strip()]
    shown = "; ".join(f"{r[0]} {r[1]}: {r[-1]}" for r in rows if len(r) >= 3)
    ok = any(r[:2] == ["io.containerd.grpc.v1", "cri"] for r in rows) and all(
        r[-1] == "ok" for r in rows
    )
    return ok, shown or (plugins.strip().splitlines() or ["no CRI plugin listed"])[-1]


def check(plan, files: Mapping[str, str | None], state: Mapping[str, Any] | None) -> list[Finding]:
    """Findings for the main file's ``imports`` and the effective config in ``state`` (the
    probe's ``containerd`` section: ``version``, ``dump`` and ``plugins``)."""
    settings = plan.settings
    path = settings["containerd_config_path"]
    pattern = containerd_drop_in_glob(path)
    hint = "run the deploy (then containerd restarts)"
    findings: list[Finding] = []

    def add(expected: str, found: str, why: str = hint) -> None:
        findings.append(Finding(plan.name, None, CHECK, expected, found, why))

    try:
        main = read_main(path, files.get(path))
    except Refused as e:
        add("a containerd config of version 1, 2 or 3", str(e), f"fix {path} by hand")
        return findings
    if main.text is None:
        add(f"{path} importing {pattern}", "missing file", hint)
    elif pattern not in main.imports:
        add(
            f"{path} imports {pattern}",
            f"imports {scalar(list(main.imports))} in {path}",
            "another tool rewrote the file (Kubespray does, kubernetes-sigs/kubespray#12277); "
            "run the deploy (it adds the import back)",
        )
    if state is None:
        add("containerd's effective config", "not read (agent too old?)", "run the deploy")
        return findings
    release = runtime_version((state.get("version") or {}).get("text"))
    dumped = state.get("dump") or {}
    if release is None or not dumped.get("ok"):
        error = (dumped.get("text") or (state.get("version") or {}).get("text") or "").strip()
        add(
            f"`containerd config dump` of {path}",
            (error.splitlines() or ["no containerd"])[-1],
            f"install containerd or fix {path}",
        )
        return findings
    try:
        effective = parse("toml", dumped["text"])
    except ParseError as e:
        add(f"`containerd config dump` of {path}", str(e), "check containerd on the host")
        return findings
    where = f"effective config of {path} + {containerd_drop_in_path(path)}"
    for key, expected, found in runtime_problems(
        effective, release, settings["container_runtime_default"]
    ):
        add(f"{key} {expected}", f"{found} ({where})")
    loaded, said = cri_loaded((state.get("plugins") or {}).get("text") or "")
    if not loaded:
        add("CRI plugin loaded (ctr plugins ls)", said, "see `journalctl -u containerd`")
    return findings


_ABSENT = object()


def last_line(text: str | None) -> str:
    """The last line of a command's output: where containerd puts its error."""
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "no output"


def _shown(value: Any) -> str:
    return "absent" if value is _ABSENT else scalar(value)


def _flatten(document: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested mappings under dotted keys (plugin ids quoted as TOML spells them)."""
    if not isinstance(document, Mapping) or not document:
        return {prefix: document} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in document.items():
        name = f'"{key}"' if "." in key else key
        out.update(_flatten(value, f"{prefix}.{name}" if prefix else name))
    return out
