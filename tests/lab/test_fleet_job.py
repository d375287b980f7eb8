"""The in-cluster deploy's Job on a real lab host: `gpuprov kube apply --fleet` puts the Plans,
the plan documents and the Job's RBAC into the lab's API server; the fleet image, built by
``gpuprov fleet image`` on a Debian base, is imported into each host's containerd; and on one
host, the real containerd runs the image as system-upgrade-controller's Job would (privileged,
host network, the host's root at /host, the Job's service account token, SUC's environment):
`gpuprov fleet apply` reads its plan document from the ConfigMap, runs the deploy through
pyinfra's @chroot connector on the host (which the SSH deploy brought to plan before), and
annotates its Node `applied` with the plan version. A host broken by hand fails its run, is
annotated `failed`, and verify names it.

What it does not show (docs/fleet.md "Not done yet"): system-upgrade-controller itself making
the Jobs on the lab's kubelets (the lab has no kube-proxy, so a pod's in-cluster API address
does not route), concurrency and re-runs across the pools.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from gpuprov_lab import consumer, fleet_image

from gpuprov.core.cluster import fleet
from gpuprov.host.contract import FLEET_NAMESPACE, FLEET_PLAN_ANNOTATION, FLEET_RESULT_ANNOTATION

pytestmark = pytest.mark.lab

SHARED = "lab-a100-01"
ACCOUNT_DIR = "/var/lib/gpuprov-lab/fleet-account"  # in the host: the Job's token and CA
AGENT = "/usr/lib/gpuprov/agent.pyz"


@pytest.fixture(scope="module")
def cluster(lab, deployed):
    """The deployed lab with `kube apply --fleet` done and the image in the host the Jobs run on
    (an import is a 265 MB unpack per host: only SHARED runs it here). The Plan
    CRD is SUC's own copy (the controller, not run here, would create it at start)."""
    consumer.apply(lab.kubeconfig, consumer.reference_crds("system-upgrade-controller-v0.20.1"))
    established = lab.kubectl(
        "wait", "--for=condition=Established", "crd/plans.upgrade.cattle.io", "--timeout=60s"
    )
    assert established.returncode == 0, established.stderr
    result = lab._gpuprov(
        "kube", "apply", str(lab.inventory), "--kubeconfig", str(lab.kubeconfig),
        "--fleet", "--image", fleet_image.IMAGE,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    fleet_image.import_into(lab.run_dir, [SHARED])
    lab.wait_planned_allocatable(60, ready=True)
    return lab


def plan_version(lab, pool: str) -> str:
    got = lab.kubectl(
        "-n", FLEET_NAMESPACE, "get", "plans.upgrade.cattle.io", fleet.plan_name(pool), "-o", "json"
    )
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)["spec"]["version"]


def run_job(lab, host: str, pool: str, version: str, name: str):
    """The Plan's container on ``host``'s containerd, set up as SUC's Job sets it up."""
    token = lab.kubectl("-n", FLEET_NAMESPACE, "create", "token", fleet.JOB_ACCOUNT)
    assert token.returncode == 0, token.stderr
    config = yaml.safe_load(lab.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    server = cluster["server"].removeprefix("https://")
    address, port = server.rsplit(":", 1)
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca = open(cluster["certificate-authority"], "rb").read()
    account = lab.run_dir.host(host).root / ACCOUNT_DIR.lstrip("/")
    account.mkdir(parents=True, exist_ok=True)
    (account / "token").write_text(token.stdout.strip())
    (account / "ca.crt").write_bytes(ca)
    node = host  # the lab's node names are its host names
    env = {
        "KUBERNETES_SERVICE_HOST": address,
        "KUBERNETES_SERVICE_PORT": port,
        "SYSTEM_UPGRADE_NODE_NAME": node,
        "SYSTEM_UPGRADE_PLAN_LATEST_VERSION": version,
        "GPUPROV_FLEET_NAMESPACE": FLEET_NAMESPACE,
    }
    command = [
        "ctr", "-n", "k8s.io", "run", "--rm", f"--snapshotter={fleet_image.SNAPSHOTTER}",
        # SUC's pod has hostPID: systemctl in the chroot then talks to the host's systemd.
        "--net-host", "--privileged", "--with-ns=pid:/proc/1/ns/pid",
        "--mount", f"type=bind,src=/,dst={fleet.HOST_ROOT},options=rbind:rw",
        "--mount", f"type=bind,src={ACCOUNT_DIR},dst=/var/run/secrets/kubernetes.io/serviceaccount,options=rbind:ro",
        *(f"--env={k}={v}" for k, v in env.items()),
        fleet_image.IMAGE, name,
        *fleet.COMMAND, "--config-map", fleet.config_map_name(pool), "--host-root", fleet.HOST_ROOT,
    ]  # fmt: skip
    return lab.run(host, " ".join(command), check=False, timeout=600)


def annotations(lab, node: str) -> dict[str, str]:
    got = lab.kubectl("get", "node", node, "-o", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)["metadata"].get("annotations", {})


def test_the_job_deploys_its_plan_through_the_chroot_and_annotates_its_node(cluster):
    version = plan_version(cluster, "shared")
    result = run_job(cluster, SHARED, "shared", version, "fleet-job-ok")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"plan {version} applied" in result.stdout
    got = annotations(cluster, SHARED)
    assert (got[FLEET_PLAN_ANNOTATION], got[FLEET_RESULT_ANNOTATION]) == (version, "applied")
    # The host is at plan as the SSH deploy left it: verify, over SSH and the API, agrees.
    verify = cluster.verify(None, "--kubeconfig", str(cluster.kubeconfig))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_host_broken_by_hand_fails_its_job_is_annotated_failed_and_verify_names_it(cluster):
    version = plan_version(cluster, "shared")
    # Where the deploy installs the agent, a directory: the upload fails, as would a full disk.
    cluster.run(SHARED, f"mv {AGENT} {AGENT}.saved && mkdir {AGENT}")
    try:
        result = run_job(cluster, SHARED, "shared", version, "fleet-job-broken")
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"plan {version} failed" in result.stdout
        assert annotations(cluster, SHARED)[FLEET_RESULT_ANNOTATION] == "failed"
        verify = cluster.verify(None, "--kubeconfig", str(cluster.kubeconfig))
        assert verify.returncode != 0 and SHARED in verify.stdout + verify.stderr
    finally:
        cluster.run(SHARED, f"rm -rf {AGENT} && mv {AGENT}.saved {AGENT}")
