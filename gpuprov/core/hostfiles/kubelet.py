"""The kubelet's ``maxPods``: gpuprov's drop-in ``<kubelet_config_dir>/50-gpuprov.conf`` when the
kubelet has a config directory, else one line edited in place in ``kubelet_config_path``.

The kubelet reads its main config, then every ``*.conf`` of its ``--config-dir`` in file name
order, a later file overriding an earlier one; each drop-in must be a whole typed
``KubeletConfiguration`` or the kubelet refuses to start
(https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/,
https://github.com/kubernetes/kubernetes/issues/124796). ``check`` computes that effective
``maxPods``, so a site drop-in sorting after gpuprov's is named as the one that wins.

>>> print(drop_in_text(142), end="")
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: 142
>>> with_max_pods("kind: KubeletConfiguration\\nmaxPods: 110\\n", 142)
'kind: KubeletConfiguration\\nmaxPods: 142\\n'
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles import Wanted
from gpuprov.core.hostfiles.documents import ParseError, Report, kind, one_line, parse, shown
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import (
    KUBELET_CONFIG_API_VERSION,
    KUBELET_CONFIG_KIND,
    KUBELET_DEFAULT_MAX_PODS,
    KUBELET_DROP_IN,
    kubelet_drop_in_glob,
    kubelet_drop_in_path,
)

CHECK = "kubelet-max-pods"
DROP_IN_CHECK = "kubelet-drop-in"
_MAX_PODS = re.compile(r"^maxPods:.*$", re.MULTILINE)  # top level only: no indentation


def paths(plan: HostPlan) -> Wanted:
    """The main config and every drop-in the kubelet reads."""
    pattern = kubelet_drop_in_glob(plan.kubelet.kubelet_config_dir)
    return Wanted(files=(plan.kubelet.kubelet_config_path,), globs=(pattern,) if pattern else ())


def target(plan: HostPlan) -> str:
    """The file gpuprov writes: its drop-in, or the main config when there is no directory."""
    directory = plan.kubelet.kubelet_config_dir
    return kubelet_drop_in_path(directory) if directory else plan.kubelet.kubelet_config_path


def render(plan: HostPlan, current: str | None = None) -> str | None:
    """The text of ``target(plan)``: the drop-in, or ``current`` (the main config's text) with
    the planned maxPods; None when ``current`` is not a mapping that can take it."""
    if plan.kubelet.kubelet_config_dir:
        return (
            f"# kubelet drop-in written by gpuprov (plan: {one_line(plan.name)}, {plan.mode}).\n"
            + drop_in_text(plan.kubelet.kubelet_max_pods)
        )
    return with_max_pods(current, plan.kubelet.kubelet_max_pods)


def drop_in_text(max_pods: int) -> str:
    """A whole KubeletConfiguration that sets only ``maxPods``."""
    return (
        f"apiVersion: {KUBELET_CONFIG_API_VERSION}\nkind: {KUBELET_CONFIG_KIND}\n"
        f"maxPods: {max_pods}\n"
    )


def with_max_pods(text: str | None, max_pods: int) -> str | None:
    """``text`` with ``maxPods: N`` replaced (or appended), every other line kept verbatim;
    None when the result would not be a YAML mapping with that maxPods."""
    text = text or ""
    line = f"maxPods: {max_pods}"
    if _MAX_PODS.search(text):
        out = _MAX_PODS.sub(line, text, count=1)
    else:
        out = text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"
    try:
        parsed = parse("yaml", out)
    except ParseError:
        return None
    if not isinstance(parsed, dict) or parsed.get("maxPods") != max_pods:
        return None
    return out


def check(plan: HostPlan, files: Mapping[str, str | None]) -> list[Finding]:
    """Findings for the kubelet's effective maxPods and gpuprov's drop-in; [] when they match."""
    report = Report(plan.name)
    main = plan.kubelet.kubelet_config_path
    directory = plan.kubelet.kubelet_config_dir
    ours = target(plan)
    sources = [main]
    if directory:
        pattern = kubelet_drop_in_glob(directory)
        # Drop-ins are applied in file name order, after the main file.
        sources += sorted(
            p
            for p in files
            if fnmatch.fnmatch(p, pattern) and posixpath.dirname(p) == directory.rstrip("/")
        )
    value: Any = KUBELET_DEFAULT_MAX_PODS
    origin = "kubelet default"
    for path in sources:
        present, doc = report.read(files, "yaml", path, CHECK)
        if present and path == ours and directory and (doc is None or isinstance(doc, Mapping)):
            _typed(report, path, doc or {})  # an empty drop-in is not a KubeletConfiguration either
        if not present or doc is None:
            continue
        if not isinstance(doc, Mapping):
            report.add(
                CHECK,
                f"a KubeletConfiguration mapping in {path}",
                f"{kind(doc)} (the kubelet cannot start)",
                f"fix or remove {path}, then run the deploy",
            )
            continue
        if "maxPods" in doc:
            value, origin = doc["maxPods"], path
    want = plan.kubelet.kubelet_max_pods
    if value == want and type(value) is int:
        if directory and files.get(ours) is None:
            # Same maxPods by chance (the kubelet's default); the deploy would still write the
            # drop-in and restart the kubelet, so verify does not say "ok".
            report.add(DROP_IN_CHECK, f"gpuprov's drop-in {ours}", "missing", "run the deploy")
        return report.findings
    hint = "run the deploy (then the kubelet restarts)"
    if origin not in (ours, main, "kubelet default") and files.get(ours) is not None:
        hint = (
            f"{posixpath.basename(origin)} comes after {KUBELET_DROP_IN} and wins: "
            "remove maxPods from it"
        )
    report.add(CHECK, f"maxPods {want}", f"maxPods {shown(value)} ({origin})", hint)
    return report.findings


def _typed(report: Report, path: str, doc: Mapping) -> None:
    """A drop-in without its apiVersion and kind stops the kubelet (kubernetes#124796)."""
    for key, want in (("apiVersion", KUBELET_CONFIG_API_VERSION), ("kind", KUBELET_CONFIG_KIND)):
        got = doc.get(key)
        if got != want:
            report.add(
                DROP_IN_CHECK,
                f"{key}: {want}",
                "unset" if got is None else f"{key}: {shown(got)}",
                f"run the deploy (it rewrites {path}, then the kubelet restarts)",
            )
