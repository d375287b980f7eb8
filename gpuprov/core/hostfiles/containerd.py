"""containerd: the main config's ``imports`` line and gpuprov's nvidia drop-in, written from what
the config files state and proven on the configuration containerd actually runs.

What the deploy and verify read from the host (``gpuprov.host.containerd_state``):
``containerd --version``, ``config dump`` with gpuprov's drop-in left out (the *source*: the node
as it is without gpuprov), the text of the files that dump imports, ``config dump`` as in
effect, and the CRI rows of ``ctr plugins ls``.

How an imported file merges depends on the containerd release (measured with 1.6.20 and 2.3.4):

- containerd 1.x loads the main file, then its imports breadth first, and each file's
  ``plugins.<id>`` table replaces the one before it whole (containerd/containerd#5837; at v1.6.20
  ``mergeConfig`` in services/server/config/config.go): a drop-in holding only
  ``runtimes.nvidia`` loses the main file's ``sandbox_image``, snapshotter and runc. Inside the
  table the plugin decodes over its defaults, tables of settings key by key but maps whole: a
  stated ``runtimes`` drops the built-in ``runc``, a stated ``options`` holds only its own keys;
- containerd 2.x merges key by key, in the same load order (containerd/containerd#9982;
  ``mergeConfig`` no longer replaces plugin tables at v2.0.0); NVIDIA's toolkit still treats
  releases before 2.1 as whole-table.

So the drop-in restates the CRI table (the one holding ``containerd.runtimes``) as the last file
containerd loads before it states it, never what the running release defaults to, then adds
the nvidia runtime. Under the whole-table rule that is the table in effect; under key-level
merging it repeats values already in effect. The same file is right under both, for any
release, and a node upgraded from 1.x to 2.x with it in place runs on 2.x's defaults
(nvidia-ctk copies the effective config instead, which pins the old release's defaults). When no file names any runtime, ``runc`` is restated as
``runtime_type = "io.containerd.runc.v2"``, the built-in of 1.6 and 2.3 alike: naming ``nvidia``
alone would drop it on 1.x.

The nvidia runtime is runc's twin: runc's table as the files state it, with the options runc runs
with (``SystemdCgroup`` on a kubeadm node, NVIDIA/nvidia-docker#1788), runc's shim and NVIDIA's
binary. Runtime options are a protobuf message (proto3, containerd's
api/types/runc/options/oci.proto): an option at its zero value (``""``, ``0``, ``false``) is the
same as one left out, and the comparisons here treat it so.

>>> main = read_main("/etc/containerd/config.toml", "version = 2\\n")
>>> (main.version, main.plugin)
(2, 'io.containerd.grpc.v1.cri')
>>> render_main(main, "/etc/containerd/conf.d/*.toml")
'version = 2\\nimports = ["/etc/containerd/conf.d/*.toml"]\\n'
>>> runtime_version("containerd github.com/containerd/containerd/v2 v2.3.4 db8809540e1a")
(2, 3, 4)
"""

from __future__ import annotations

import base64
import binascii
import copy
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

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
    main = plan.runtime.containerd_config_path
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
    import tomlkit  # only the deploy writes TOML; verify reads it (tomllib), and skips this import

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


def nvidia_runtime(runc: Mapping[str, Any], running: Mapping[str, Any] | None = None) -> dict:
    """runc's twin: ``runc``'s table as stated, its options as runc runs with them
    (``running``: runc's ``options`` in the effective config, zero values left out), runc's shim
    and NVIDIA's binary.

    >>> nvidia_runtime({"runtime_type": "io.containerd.runc.v2", "runtime_root": ""},
    ...                {"SystemdCgroup": True, "IoUid": 0})
    {'runtime_type': 'io.containerd.runc.v2', 'runtime_root': '', 'options': {'SystemdCgroup': True, 'BinaryName': '/usr/bin/nvidia-container-runtime'}}
    """
    out = copy.deepcopy(dict(runc))
    options = copy.deepcopy(dict(runc.get("options") or {}))
    for key, value in (running or {}).items():
        if key in options or not _is_zero(value):
            options[key] = copy.deepcopy(value)
    options["BinaryName"] = NVIDIA_RUNTIME_BINARY
    out["runtime_type"] = NVIDIA_RUNTIME_TYPE
    out["options"] = options
    return out


def load_order(main: str, documents: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The files containerd loads for the main file ``main``, in its order: breadth first from
    ``main``, each ``imports`` entry in turn, a pattern (an entry with ``*``) by its matches
    sorted, a relative path beside the file naming it, a file seen before skipped
    (``LoadConfig`` and ``resolveImports`` in containerd's server/config/config.go, the same in
    v1.6.20 and v2.3.4). ``documents`` holds each file's parsed text; a pattern matches only
    among them (the files the host showed); KeyError names a file it lacks or holds as None.

    >>> load_order("/c/config.toml", {"/c/config.toml": {"imports": ["/c/d/*.toml", "x.toml"]},
    ...     "/c/d/b.toml": {}, "/c/d/a.toml": {"imports": ["/c/y.toml"]}, "/c/x.toml": {},
    ...     "/c/y.toml": {}})
    ['/c/config.toml', '/c/d/a.toml', '/c/d/b.toml', '/c/x.toml', '/c/y.toml']
    """
    order: list[str] = []
    pending = [main]
    while pending:
        path = pending.pop(0)
        if path in order:
            continue
        order.append(path)
        document = documents[path]
        if document is None:
            raise KeyError(path)
        for entry in document.get("imports") or []:
            if "*" in entry:
                pending += sorted(
                    (p for p in documents if PurePosixPath(p).match(entry)),
                    key=lambda p: p.split("/"),
                )
            else:
                pending.append(posixpath.normpath(posixpath.join(posixpath.dirname(path), entry)))
    return order


def stated_table(main: MainFile, imported: Mapping[str, str | None]) -> dict[str, Any]:
    """The CRI table (``main.plugin``) as the last file containerd loads before gpuprov's drop-in
    states it ({} when none does); ``imported``: the text of the other files (the state's
    ``imports`` section). Refused names a file gpuprov could not read."""
    ours = containerd_drop_in_path(main.path)
    documents: dict[str, Mapping[str, Any] | None] = {main.path: main.document, ours: {}}
    unreadable: dict[str, str] = {}
    for path, text in imported.items():
        if path in documents:
            continue
        try:
            documents[path] = parse("toml", text) if text is not None else None
        except ParseError as e:
            documents[path], unreadable[path] = None, str(e)
        if text is None:
            unreadable[path] = "not UTF-8 text"
    try:
        order = load_order(main.path, documents)
    except KeyError as e:
        [path] = e.args
        why = unreadable.get(path, "which gpuprov cannot read")
        raise Refused(f"{main.path}: containerd imports {path}, {why}") from None
    tables = [dig(documents[p], "plugins", main.plugin) for p in order]
    stated = [t for t in tables if isinstance(t, Mapping)]
    return copy.deepcopy(dict(stated[-1])) if stated else {}


def render_drop_in(
    main: MainFile,
    stated: Mapping[str, Any],
    running: Mapping[str, Any] | None,
    default: bool,
) -> str:
    """The drop-in: the ``stated`` CRI table (see ``stated_table``) plus runc's twin (runc's
    effective ``running`` options, see ``nvidia_runtime``) and, when ``default``, nvidia as the
    default runtime.

    >>> print(render_drop_in(read_main("/etc/containerd/config.toml", "version = 2\\n"),
    ...                      {}, {"SystemdCgroup": False}, default=True), end="")
    # nvidia runtime for containerd, written by gpuprov.
    # Imported by /etc/containerd/config.toml; rewritten by every deploy.
    version = 2
    <BLANKLINE>
    [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "nvidia"
    <BLANKLINE>
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    <BLANKLINE>
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"
    <BLANKLINE>
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
    """
    section = copy.deepcopy(dict(stated))
    containerd = dict(section.get("containerd") or {})
    runtimes = containerd.get("runtimes")
    runtimes = (
        dict(runtimes)
        if isinstance(runtimes, Mapping)
        else {RUNC: {"runtime_type": NVIDIA_RUNTIME_TYPE}}
    )
    twin = nvidia_runtime(runc_runtime({**containerd, "runtimes": runtimes}), running)
    containerd["runtimes"] = {**runtimes, NVIDIA_RUNTIME: twin}
    if default:
        containerd["default_runtime_name"] = NVIDIA_RUNTIME
    section["containerd"] = containerd
    import tomlkit  # as in render_main

    document = tomlkit.document()
    document.add(tomlkit.comment("nvidia runtime for containerd, written by gpuprov."))
    document.add(tomlkit.comment(f"Imported by {main.path}; rewritten by every deploy."))
    if main.version != 1:  # no `version` is version 1; `version = 1` is refused by 2.x
        document.add("version", main.version)
    document.add("plugins", {main.plugin: section})
    return tomlkit.dumps(document)


def imported_texts(section: Mapping[str, Any] | None) -> dict[str, str | None]:
    """``{path: text}`` from the state's ``imports`` section (None for a text that is not
    base64 of UTF-8).

    >>> imported_texts({"ok": True, "text": "/etc/containerd/conf.d/10-a.toml\\tdmVyc2lvbiA9IDIK"})
    {'/etc/containerd/conf.d/10-a.toml': 'version = 2\\n'}
    """
    out: dict[str, str | None] = {}
    for line in ((section or {}).get("text") or "").splitlines():
        path, _, data = line.partition("\t")
        path = posixpath.normpath(path)
        try:
            out[path] = base64.b64decode(data, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            out[path] = None
    return out


def render(plan, main_text: str | None, state: Mapping[str, Any]) -> tuple[str, str]:
    """(main file, drop-in) the deploy writes for ``plan``, from the main file's text and the
    host's ``state`` (``version``, ``source`` and ``imports`` sections); Refused names the file
    and why."""
    return render_files(
        plan.runtime.containerd_config_path,
        main_text,
        state,
        plan.runtime.container_runtime_default,
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
    containerd = dig(dumped, "plugins", dump_plugin(release), "containerd")
    if not isinstance(containerd, Mapping):
        raise Refused(
            f"{path}: containerd {'.'.join(map(str, release))} shows no CRI plugin "
            f"section ({dump_plugin(release)}) in its config dump; is CRI disabled?"
        )
    imports = state.get("imports")
    if imports is not None and not imports.get("ok"):
        raise Refused(
            f"{path}: cannot read the files containerd imports: {last_line(imports.get('text'))}"
        )
    stated = stated_table(main, imported_texts(imports))
    running = runc_runtime(containerd).get("options")
    return render_main(main, containerd_drop_in_glob(path)), render_drop_in(
        main, stated, running if isinstance(running, Mapping) else None, default
    )


def runtime_problems(
    effective: Mapping[str, Any], release: tuple[int, ...], default: bool
) -> list[tuple[str, str, str]]:
    """(key, expected, found) for each way ``effective`` (a parsed dump) lacks the nvidia
    runtime as planned: runc's twin (runc's shim, each option as runc has it, one at zero the
    same as one left out) with NVIDIA's binary, and the default when planned.

    >>> runtime_problems({"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {
    ...     "runc": {"options": {"SystemdCgroup": True, "IoUid": 0}},
    ...     "nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {
    ...         "BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": False}}}}}}},
    ...     (1, 6, 20), default=False)
    [('runtimes.nvidia.options.SystemdCgroup', 'true', 'false')]
    """
    containerd = dig(effective, "plugins", dump_plugin(release), "containerd")
    if not isinstance(containerd, Mapping):
        return [("CRI plugin section", dump_plugin(release), "missing")]
    nvidia = dig(containerd, "runtimes", NVIDIA_RUNTIME)
    if not isinstance(nvidia, Mapping):
        return [("runtimes.nvidia", "runc's twin with NVIDIA's binary", "missing")]
    problems = []
    runc = runc_runtime(containerd).get("options") or {}
    options = nvidia.get("options") if isinstance(nvidia.get("options"), Mapping) else {}
    want = {"runtime_type": NVIDIA_RUNTIME_TYPE, "options.BinaryName": NVIDIA_RUNTIME_BINARY}
    for key in sorted(set(runc) | set(options)):  # runc's, each (or left out when at zero)
        if key != "BinaryName":
            want[f"options.{key}"] = runc.get(key)
    for key, value in want.items():
        got = dig(nvidia, *key.split("."))
        if (got is None or _is_zero(got)) and (value is None or _is_zero(value)):
            continue
        if got != value or type(got) is not type(value):
            shown = "unset" if got is None else scalar(got)
            problems.append(
                (f"runtimes.nvidia.{key}", "unset" if value is None else scalar(value), shown)
            )
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
    A runtime option at its zero value and one left out are the same (see the module docstring):
    containerd 1.x dumps its built-in runc with every option at zero, and runc restated by the
    drop-in with none.

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
            for runtime in runtimes.values():
                _drop_zero_options(runtime)
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
    path = plan.runtime.containerd_config_path
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
    # Only a section that says it succeeded (`ok` exactly true) is read: a failed
    # `containerd --version` may still print text, and a failed dump an old file.
    version = state.get("version") or {}
    release = runtime_version(version.get("text")) if version.get("ok") is True else None
    dumped = state.get("dump") or {}
    if release is None:
        found = "failed: " if version and version.get("ok") is not True else "no release in: "
        add(
            "`containerd --version` naming its release",
            found + last_line(version.get("text")) if version else "not run (no containerd)",
            "install containerd",
        )
        return findings
    if dumped.get("ok") is not True:
        add(
            f"`containerd config dump` of {path}",
            last_line(dumped.get("text")) if dumped else "not run",
            f"fix {path}",
        )
        return findings
    try:
        effective = parse("toml", dumped["text"])
    except ParseError as e:
        add(f"`containerd config dump` of {path}", str(e), "check containerd on the host")
        return findings
    where = f"effective config of {path} + {containerd_drop_in_path(path)}"
    for key, expected, found in runtime_problems(
        effective, release, plan.runtime.container_runtime_default
    ):
        add(f"{key} {expected}", f"{found} ({where})")
    loaded, said = cri_loaded((state.get("plugins") or {}).get("text") or "")
    if not loaded:
        add("CRI plugin loaded (ctr plugins ls)", said, "see `journalctl -u containerd`")
    return findings


_ABSENT = object()


def _is_zero(value: Any) -> bool:
    """A protobuf scalar at its default: ``""``, ``0`` or ``false``."""
    return isinstance(value, (str, int, float)) and not value


def _drop_zero_options(runtime: Any) -> None:
    """Leave out a runtime's options at zero (and its ``options`` when none is left)."""
    if not isinstance(runtime, dict) or not isinstance(runtime.get("options"), dict):
        return
    runtime["options"] = {k: v for k, v in runtime["options"].items() if not _is_zero(v)}
    if not runtime["options"]:
        del runtime["options"]


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
