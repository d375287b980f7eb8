"""Build the real Kubernetes parts the lab runs (kube-apiserver, kube-scheduler,
kube-controller-manager, kubelet, kubectl, etcd) with Go from the module proxy, at versions pinned
here, once per version.

Each component is built in its own Go module under ``/var/tmp/gpuprov-kube-<version>/`` (outside
any work tree, kept across lab runs and CI runs on the same machine), so a second ``lab up``
builds nothing. ``k8s.io/kubernetes`` cannot be required as a plain module: its ``go.mod`` names
its staging modules (``k8s.io/api``, ``k8s.io/client-go``, ...) at ``v0.0.0``, so every staging
module is replaced by its published ``v0.<minor>.<patch>`` tag (the ``unknown revision v0.0.0``
failure of kubernetes/kubernetes#79384).

A cold build (empty Go build and module caches, nothing else running) took 341 s on the 2-core
CI machine, the module downloads included; on a machine busy with other work it took up to 15
minutes. A warm one is a check of six files.

>>> binaries("/var/tmp/gpuprov-kube-1.34.4")["kubelet"]  # doctest: +SKIP
PosixPath('/var/tmp/gpuprov-kube-1.34.4/kubernetes/bin/kubelet')
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gpuprov_lab.errors import LabError
from gpuprov_lab.gobuild import build_lock

KUBERNETES_VERSION = "1.34.4"
ETCD_VERSION = "3.6.16"
KUBERNETES_COMMANDS = (
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubelet",
    "kubectl",
)
# NVIDIA's config-manager (the device plugin chart's sidecar), at the plugin's own release.
CONFIG_MANAGER_MODULE = "github.com/NVIDIA/k8s-device-plugin"
CONFIG_MANAGER_VERSION = "0.20.0"
CACHE = Path("/var/tmp")
COLD_BUILD_MINUTES = 6  # measured on the 2-core CI machine (see the module docstring)
# The staging modules of k8s.io/kubernetes 1.34 (its go.mod `replace` block), each published as
# k8s.io/<name> at v0.<minor>.<patch>.
_STAGING = (
    "api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider "
    "cluster-bootstrap code-generator component-base component-helpers controller-manager "
    "cri-api cri-client csi-translation-lib dynamic-resource-allocation endpointslice "
    "externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl "
    "kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin "
    "sample-controller"
).split()
_ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def cache_dir() -> Path:
    """Where this version's builds live (one directory per pinned version pair)."""
    return CACHE / f"gpuprov-kube-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"


def binaries(base: Path | None = None) -> dict[str, Path]:
    """Command name -> the path of its binary in the cache (built or not)."""
    base = base or cache_dir()
    out = {c: base / "kubernetes" / "bin" / c for c in KUBERNETES_COMMANDS}
    out["etcd"] = base / "etcd" / "bin" / "etcd"
    return out


def ensure(log=sys.stderr) -> dict[str, Path]:
    """Every binary of ``binaries()``, built first where missing. Raises LabError when Go fails."""
    wanted = binaries()
    if all(path.is_file() for path in wanted.values()):
        return wanted
    with build_lock():
        return _ensure(wanted, log)


def _ensure(wanted: dict[str, Path], log) -> dict[str, Path]:
    missing = [name for name, path in wanted.items() if not path.is_file()]
    if not missing:  # built by the run that held the lock before us
        return wanted
    started = time.monotonic()
    print(
        f"building {', '.join(missing)} (Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION}) "
        f"into {cache_dir()}: once per machine and version; a cold build took about "
        f"{COLD_BUILD_MINUTES} minutes on 2 cores",
        file=log,
    )
    if any(name in KUBERNETES_COMMANDS for name in missing):
        _build_kubernetes(cache_dir() / "kubernetes", [m for m in missing if m != "etcd"])
    if "etcd" in missing:
        _build_etcd(cache_dir() / "etcd")
    print(f"built in {time.monotonic() - started:.0f} s", file=log)
    return wanted


def config_manager_binary() -> Path:
    """Where the built config-manager of ``CONFIG_MANAGER_VERSION`` lives (built or not)."""
    return CACHE / "gpuprov-bin" / f"config-manager-v{CONFIG_MANAGER_VERSION}"


def config_manager(log=sys.stderr) -> Path:
    """NVIDIA's ``cmd/config-manager``, built from the module proxy first when missing.

    Raises LabError with Go's own words when the build fails: here the Go module proxy answers
    ``403 Forbidden ... This module version is not available.`` for every version of
    ``github.com/NVIDIA/k8s-device-plugin`` (docs/kubernetes.md).
    """
    binary = config_manager_binary()
    if binary.is_file():
        return binary
    with build_lock():
        if binary.is_file():
            return binary
        return _build_config_manager(binary, log)


def _build_config_manager(binary: Path, log) -> Path:
    module = CACHE / f"gpuprov-config-manager-{CONFIG_MANAGER_VERSION}"
    print(f"building config-manager v{CONFIG_MANAGER_VERSION} in {module}", file=log)
    _module(module, "gpuprov.invalid/configmanagerbuild")
    _go(module, "get", f"{CONFIG_MANAGER_MODULE}@v{CONFIG_MANAGER_VERSION}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".{binary.name}.{os.getpid()}")
    command = f"{CONFIG_MANAGER_MODULE}/cmd/config-manager"
    _go(module, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), command)
    partial.replace(binary)  # whole or not at all: a second run never finds half a binary
    return binary


def _go(module: Path, *args: str) -> None:
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    result = subprocess.run(["go", *args], cwd=module, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-15:]
        raise LabError(f"`go {' '.join(args)}` in {module} failed:\n" + "\n".join(tail))


def _module(path: Path, name: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "go.mod").exists():
        _go(path, "mod", "init", name)


def _build_kubernetes(module: Path, commands: list[str]) -> None:
    _module(module, "gpuprov.invalid/kubebuild")
    minor_patch = KUBERNETES_VERSION.split(".", 1)[1]
    for name in _STAGING:
        _go(module, "mod", "edit", f"-replace=k8s.io/{name}=k8s.io/{name}@v0.{minor_patch}")
    _go(module, "get", f"k8s.io/kubernetes@v{KUBERNETES_VERSION}")
    version_flag = f"-X k8s.io/component-base/version.gitVersion=v{KUBERNETES_VERSION}"
    for command in commands:
        _build_binary(
            module, module / "bin" / command, f"k8s.io/kubernetes/cmd/{command}", version_flag
        )


def _build_etcd(module: Path) -> None:
    _module(module, "gpuprov.invalid/etcdbuild")
    (module / "main.go").write_text(_ETCD_MAIN)
    _go(module, "get", f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}")
    _build_binary(module, module / "bin" / "etcd", ".")


def _build_binary(module: Path, out: Path, package: str, ldflags: str = "") -> None:
    """``go build`` into a temporary name, then renamed: the cache never holds half a binary."""
    partial = out.with_name(f".{out.name}.{os.getpid()}")
    flags = f"-s -w {ldflags}".strip()
    _go(module, "build", "-trimpath", "-ldflags", flags, "-o", str(partial), package)
    partial.replace(out)


if __name__ == "__main__":  # `python -m gpuprov_lab.kubebuild`: what .ci/run does before the tests
    try:
        for name, path in ensure().items():
            print(f"{name}: {path}")
    except LabError as e:
        sys.exit(f"error: {e}")
