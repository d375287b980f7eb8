"""Volcano v1.15.1 on the controller machine: ``vc-webhook-manager``, ``vc-controller-manager``
and ``vc-scheduler`` against an API server, with Volcano's CRDs and admission webhooks.

The three binaries are the project's shared builds (``shared/bin/vc-*.xz``, decompressed once
into ``/var/tmp/gpuprov-bin`` and checked against the README's sha256, as the device plugin),
the CRDs the shared copies of ``config/crd/{volcano,jobflow}/bases`` (checked against
``SHA256SUMS``), the webhook configurations the seven of Volcano's development install
(``installer/volcano-development.yaml``, ``# Source: volcano/templates/webhooks.yaml``).

What running outside a pod takes (volcano-sh/volcano at v1.15.1):

- ``--kubeconfig`` for all three (they do not read ``$KUBECONFIG``; ``pkg/kube/config.go:33-47``)
  and ``--leader-elect=false`` for the scheduler and controller manager (default true, a Lease
  in ``volcano-system``; ``cmd/scheduler/main.go:64-66``, ``cmd/controller-manager/main.go:86-88``).
- The webhook manager creates no webhook configuration: for each ``--enabled-admission`` path it
  waits up to 5 minutes for ``volcano-admission-service-<path with - for />`` and writes
  ``--ca-cert-file`` into its ``caBundle``, and serves HTTPS only after that
  (``cmd/webhook-manager/app/util.go:41-111``, ``app/server.go:91-144``). So the configurations
  are applied first, with ``clientConfig.url`` to this machine's address (no Service routes
  here), and the path list is exactly theirs. It needs ``--tls-cert-file``,
  ``--tls-private-key-file`` and ``--ca-cert-file`` always (``cmd/webhook-manager/main.go:79-81``)
  and one of ``--webhook-url``/``--webhook-service-name`` set (only checked for "not empty",
  ``app/server.go:51-53``).
- The scheduler makes the Queues ``root`` and ``default`` at start (``pkg/scheduler/cache/
  cache.go:464-520``); the controller manager's queue controller sets their ``status.state``
  to ``Open`` (``pkg/controllers/queue/queue_controller_action.go:100-135``): ``start`` waits
  for that, which shows both run against the API server.
- The scheduler's klog control socket goes to ``$DEBUG_SOCKET_DIR`` (default
  ``/tmp/klog-socks``, ``pkg/util/socket.go:39-41``) and its cache dumps to ``--cache-dump-dir``
  (default ``/tmp``): both in the run's directory, so two Volcanos share nothing.

The scheduler configuration is the caller's (``scheduler_conf``): it must enable either the
``capacity`` plugin or the ``proportion`` plugin for queues, never both ("capacity and
proportion plugin are in conflict, the two plugins cannot be used together",
``docs/user-guide/how_to_use_capacity_plugin.md``). ``proportion`` divides the cluster by
``weight`` and ignores ``spec.deserved``; ``capacity`` honours ``deserved`` per resource, lets a
queue borrow up to its ``capability``, reclaims (it needs the ``reclaim`` action) and, with
``enableHierarchy``, nested queues.

>>> sorted(scheduler_conf("capacity")["tiers"][1]["plugins"][2].items())
[('name', 'capacity')]
>>> scheduler_conf("capacity")["actions"]
'enqueue, allocate, backfill, reclaim'
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

import yaml

from gpuprov_lab import consumer, plugin_service, webhook_tls
from gpuprov_lab.errors import LabError

RELEASE = "volcano-v1.15.1"
BINARIES = ("vc-webhook-manager", "vc-controller-manager", "vc-scheduler")
NAMESPACE = "volcano-system"
QUEUE_PLUGINS = ("capacity", "proportion")
DEFAULT_QUEUE_PLUGIN = "capacity"  # gpuprov's queues carry `deserved` per pool resource
_WEBHOOKS = "volcano-development-webhooks.yaml"


def binaries() -> dict[str, Path]:
    """Each Volcano binary, decompressed into the cache (once) and checked."""
    return {name: plugin_service.binary(name) for name in BINARIES}


def crds() -> list[dict]:
    """Volcano's 11 CRDs at v1.15.1, each checked against the shared ``SHA256SUMS``."""
    return consumer.reference_crds(RELEASE)


def scheduler_conf(queue_plugin: str = DEFAULT_QUEUE_PLUGIN, hierarchy: bool = False) -> dict:
    """The scheduler configuration of Volcano's chart (``installer/helm/chart/volcano/config/
    volcano-scheduler.conf``) with ``queue_plugin`` for queues.

    ``capacity``: as Volcano's capacity user guide has it, the ``reclaim`` action added,
    ``proportion`` replaced, and ``overcommit`` left out (the capacity plugin checks a job's
    ``minResources`` against the queue at enqueue itself); ``hierarchy`` turns on nested queues
    (``spec.parent``). ``proportion``: the chart's configuration unchanged.
    """
    if queue_plugin not in QUEUE_PLUGINS:
        raise ValueError(f"queue_plugin must be one of {QUEUE_PLUGINS}, not {queue_plugin!r}")
    if hierarchy and queue_plugin != "capacity":
        raise ValueError("nested queues need the capacity plugin (enableHierarchy)")
    first = [
        {"name": "priority"},
        {"name": "gang", "enablePreemptable": False},
        {"name": "conformance"},
    ]
    if queue_plugin == "proportion":
        actions = "enqueue, allocate, backfill"
        second = [
            {"name": "overcommit"},
            {"name": "drf", "enablePreemptable": False},
            {"name": "predicates"},
            {"name": "proportion"},
            {"name": "nodeorder"},
            {"name": "binpack"},
        ]
    else:
        actions = "enqueue, allocate, backfill, reclaim"
        capacity = {"name": "capacity", **({"enableHierarchy": True} if hierarchy else {})}
        second = [
            {"name": "drf", "enablePreemptable": False},
            {"name": "predicates"},
            capacity,
            {"name": "nodeorder"},
            {"name": "binpack"},
        ]
    return {"actions": actions, "tiers": [{"plugins": first}, {"plugins": second}]}


def webhook_configurations(base_url: str, ca_bundle: str) -> list[dict]:
    """Volcano's seven webhook configurations, calling ``base_url`` + each path."""
    source = consumer.shared_reference() / "manifests" / RELEASE / _WEBHOOKS
    try:
        documents = [d for d in yaml.safe_load_all(source.read_text()) if d]
    except OSError as e:
        raise LabError(f"cannot read {source}: {e}") from None
    for document in documents:
        for webhook in document["webhooks"]:
            service = webhook["clientConfig"].pop("service")
            webhook["clientConfig"]["url"] = base_url + service["path"]
            webhook["clientConfig"]["caBundle"] = ca_bundle
    return documents


def admission_paths(configurations: list[dict]) -> list[str]:
    """The paths the configurations call: the webhook manager's ``--enabled-admission``."""
    return [
        "/" + w["clientConfig"]["url"].split("/", 3)[3]
        for d in configurations
        for w in d["webhooks"]
    ]


def start(
    kubeconfig: Path,
    address: str,
    workdir: Path,
    scheduler_config: Path | None = None,
    timeout: float = 120.0,
) -> consumer.Consumer:
    """Volcano's CRDs, webhook configurations and its three processes, the webhooks served on
    ``address``; the scheduler reads ``scheduler_config`` (default: ``scheduler_conf()``
    written into ``workdir``). Returns once the ``default`` Queue is ``Open``."""
    programs = binaries()
    handle = consumer.Consumer("volcano", workdir, kubeconfig)
    documents = crds()
    consumer.apply(kubeconfig, documents)
    consumer.wait_established(kubeconfig, [d["metadata"]["name"] for d in documents])
    consumer.apply(
        kubeconfig, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
    )
    tls = webhook_tls.make(workdir / "certs", address)
    (port,) = consumer.free_ports(address)
    handle.endpoints = [(address, port)]
    base_url = f"https://{address}:{port}"
    webhooks = webhook_configurations(base_url, tls.ca_bundle())
    for document in webhooks:
        handle.delete_on_stop(document["kind"], document["metadata"]["name"])
    consumer.apply(kubeconfig, webhooks)
    if scheduler_config is None:
        scheduler_config = workdir / "volcano-scheduler.conf"
        scheduler_config.write_text(yaml.safe_dump(scheduler_conf(), sort_keys=False))
    env = {**os.environ, "DEBUG_SOCKET_DIR": str(workdir / "klog-socks")}
    common = [f"--kubeconfig={kubeconfig}"]
    handle.start_process(
        "vc-webhook-manager",
        [
            str(programs["vc-webhook-manager"]),
            *common,
            f"--listen-address={address}",
            f"--port={port}",
            f"--webhook-url={base_url}",
            f"--tls-cert-file={tls.cert}",
            f"--tls-private-key-file={tls.key}",
            f"--ca-cert-file={tls.ca}",
            f"--enabled-admission={','.join(admission_paths(webhooks))}",
        ],
        env=env,
    )
    handle.wait(
        "webhook server", lambda: _serves_tls(address, port, tls.ca), timeout, "vc-webhook-manager"
    )
    handle.start_process(
        "vc-controller-manager",
        [str(programs["vc-controller-manager"]), *common, "--leader-elect=false"],
        env=env,
    )
    handle.start_process(
        "vc-scheduler",
        [
            str(programs["vc-scheduler"]),
            *common,
            "--leader-elect=false",
            f"--scheduler-conf={scheduler_config}",
            # an unreadable or invalid file is an exit, not Volcano's built-in defaults
            "--disable-default-scheduler-config",
            f"--cache-dump-dir={workdir}",
        ],
        env=env,
    )
    handle.wait(
        "Open default Queue", lambda: _queue_open(kubeconfig, "default"), timeout, "vc-scheduler"
    )
    return handle


def stop(workdir: Path) -> None:
    """End the Volcano started in ``workdir`` and remove its webhook configurations."""
    consumer.stop(workdir)


def _serves_tls(address: str, port: int, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection((address, port), timeout=2) as raw:
            with context.wrap_socket(raw, server_hostname=address):
                return True
    except OSError:
        return False


def _queue_open(kubeconfig: Path, name: str) -> bool:
    queue = consumer.get_json(kubeconfig, "queues.scheduling.volcano.sh", name)
    return bool(queue) and queue.get("status", {}).get("state") == "Open"
