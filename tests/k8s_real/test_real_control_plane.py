"""The dev cluster itself, on the real API server: nodes caldera can read, the KWOK pod
lifecycle (bound → Running → Succeeded/Failed; deletion honours the grace period), RBAC on
token users, and a clean stop."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
from real_support import NODES, wait_for

from caldera.devcluster import DevCluster
from caldera.k8s.cluster.client import KubeClusterAPI, load_api_client
from caldera.k8s.reading.nodes import read_nodes
from caldera.k8s.settings import KubeSettings

k8s: Any = kubernetes
CALDERA = Path(sys.executable).with_name("caldera")


def pod(name: str, gpus: int = 1, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:v1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def phase(core: Any, namespace: str, name: str) -> str | None:
    try:
        return str(core.read_namespaced_pod(name, namespace).status.phase)
    except k8s.client.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_caldera_reads_the_kwok_nodes_with_their_gpus_and_topology(dev_cluster: DevCluster) -> None:
    api = KubeClusterAPI.from_kubeconfig(str(dev_cluster.kubeconfig()))
    try:
        state = read_nodes(api.list_nodes("caldera.io/kwok=true"), KubeSettings())
    finally:
        api.close()
    assert [n.name for n in state.nodes] == [f"kwok-gpu-{i:02d}" for i in range(NODES.count)]
    assert {n.gpus for n in state.nodes} == {NODES.gpus}
    assert state.closed == frozenset()  # KWOK keeps them Ready
    leaves = [n.tier1 for n in state.nodes]
    assert leaves[0] == leaves[1] != leaves[2] == leaves[3]  # two nodes per leaf switch


def test_a_bound_pod_runs_then_completes_after_its_annotated_duration(
    core: Any, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, pod("ok", **{"caldera.io/kwok-run-for": "2s"}))
    core.create_namespaced_pod(namespace, pod("bad", **{"caldera.io/kwok-fail-after": "2s"}))
    wait_for(
        "both pods Running",
        lambda: (
            phase(core, namespace, "ok") == "Running" and phase(core, namespace, "bad") == "Running"
        ),
    )
    ran = core.read_namespaced_pod("ok", namespace)
    assert ran.spec.node_name.startswith("kwok-gpu-")  # bound by kube-scheduler
    wait_for("ok Succeeded", lambda: phase(core, namespace, "ok") == "Succeeded", timeout=60)
    wait_for("bad Failed", lambda: phase(core, namespace, "bad") == "Failed", timeout=60)
    done = core.read_namespaced_pod("bad", namespace).status.container_statuses[0]
    assert done.state.terminated.exit_code == 1


def test_a_pod_with_too_many_gpus_stays_pending(core: Any, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod("huge", gpus=NODES.gpus + 1))
    time.sleep(2)
    assert phase(core, namespace, "huge") == "Pending"
    assert core.read_namespaced_pod("huge", namespace).spec.node_name is None


def test_a_deleted_pod_stays_terminating_for_its_grace_period(core: Any, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod("slow"))
    core.create_namespaced_pod(namespace, pod("quick", **{"caldera.io/kwok-exit-after-term": "1"}))
    wait_for(
        "pods Running",
        lambda: (
            phase(core, namespace, "slow") == "Running"
            and phase(core, namespace, "quick") == "Running"
        ),
    )
    deleted = time.monotonic()
    for name in ("slow", "quick"):
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=10)
    wait_for(
        "quick gone (exits 1 s after SIGTERM)",
        lambda: phase(core, namespace, "quick") is None,
        timeout=60,
    )
    assert time.monotonic() - deleted < 8  # long before the grace period ends
    assert phase(core, namespace, "slow") == "Running"  # still terminating
    assert core.read_namespaced_pod("slow", namespace).metadata.deletion_timestamp is not None
    wait_for(
        "slow gone at the end of its grace period",
        lambda: phase(core, namespace, "slow") is None,
        timeout=60,
    )
    assert time.monotonic() - deleted >= 9  # deletionTimestamp has whole seconds


def test_a_user_without_rights_is_refused_until_rbac_grants_them(
    dev_cluster: DevCluster, api_client: Any, core: Any, namespace: str
) -> None:
    alice = k8s.client.CoreV1Api(api_client("alice"))
    with pytest.raises(k8s.client.ApiException) as refused:
        alice.list_namespaced_pod(namespace)
    assert refused.value.status == 403
    rbac = k8s.client.RbacAuthorizationV1Api(api_client("admin"))
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "alice-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    wait_for("alice may list pods", lambda: _can_list(alice, namespace))
    with pytest.raises(k8s.client.ApiException) as still:
        alice.create_namespaced_pod(namespace, pod("x"))
    assert still.value.status == 403
    with pytest.raises(k8s.client.ApiException) as elsewhere:
        alice.list_namespaced_pod("default")
    assert elsewhere.value.status == 403
    bob = k8s.client.CoreV1Api(api_client("bob"))
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "team-b-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {"kind": "Group", "name": "team-b", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    wait_for("bob may list pods through his group", lambda: _can_list(bob, namespace))
    unknown = httpx.get(
        f"{dev_cluster.server}/api/v1/nodes",
        headers={"Authorization": "Bearer not-a-token"},
        verify=ssl.create_default_context(cafile=str(dev_cluster.ca_file())),
    )
    assert unknown.status_code == 401  # unauthenticated, not merely forbidden


def _can_list(api: Any, namespace: str) -> bool:
    try:
        api.list_namespaced_pod(namespace)
    except k8s.client.ApiException:
        return False
    return True


def test_the_cli_starts_a_cluster_in_seconds_and_stop_leaves_no_process(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    """A second, one-node cluster beside the session's, through `caldera k8s dev-cluster`."""
    folder = tmp_path / "c"
    env = {**os.environ, "CALDERA_CLUSTER_BIN_DIR": str(dev_cluster.bins), "NO_COLOR": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(CALDERA), "k8s", "dev-cluster", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    started = time.monotonic()
    up = cli("start", "--dir", str(folder), "--nodes", "1", "--no-build")
    took = time.monotonic() - started
    assert up.returncode == 0, up.stderr
    assert "export KUBECONFIG=" in up.stdout
    attached = DevCluster.attach(folder)
    pids = attached.pids
    try:
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager",
                             "kube-scheduler", "kwok"}  # fmt: skip
        assert all(attached.running().values()), attached.running()
        path = cli("kubeconfig", "--dir", str(folder), "--user", "bob").stdout.strip()
        bob = k8s.client.CoreV1Api(load_api_client(path))
        with pytest.raises(k8s.client.ApiException) as refused:
            bob.list_node()
        assert refused.value.status == 403
        bob.api_client.close()
        again = cli("start", "--dir", str(folder), "--no-build")
        assert again.returncode == 1
        assert "already holds a dev cluster" in again.stderr
    finally:
        down = cli("stop", "--dir", str(folder))
    assert down.returncode == 0, down.stderr
    for pid in pids.values():
        assert not _exists(pid)
    assert cli("stop", "--dir", str(folder)).returncode == 1  # nothing left to stop
    assert took < 60, f"start took {took:.1f} s"


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False
