"""Nodes that stop serving (issue 10: "stuck node"), on the real control plane: a node
drained with the real `kubectl drain` (cordon, then the Eviction API), and a node whose
kubelet stops answering (KWOK lets go of it and its Ready condition turns False, as the node
lifecycle controller would write it).

- Drained: the evicted pod breaks its gang; caldera stops the rest, requeues the job — not
  failed, no retry spent — and starts it again elsewhere, never on the cordoned node.
- Not Ready: what runs there is left alone (its pods still hold their GPUs), and its free
  GPUs are offered to nobody: a job that would fit only there waits, and starts there once
  the node is Ready again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
from caldera_support import Cluster, training_job
from real_support import NODES, wait_for

from caldera.devcluster import KWOK_LABEL

k8s: Any = kubernetes


def nodes_of(cluster: Cluster, job: str) -> list[str]:
    return sorted(p.spec.node_name for p in cluster.running_pods("team-a", job))


def test_a_drained_node_stops_the_gang_which_is_requeued_and_runs_elsewhere(
    clean: Cluster,
) -> None:
    assert clean.apply("bob", "team-a", training_job("train", replicas=2)).returncode == 0
    clean.wait("team-a", "train", "Running")
    wait_for("both pods running", lambda: len(nodes_of(clean, "train")) == 2)
    drained = nodes_of(clean, "train")[0]
    try:
        done = clean.kubectl(
            "admin", "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data",
            "--force", "--timeout=90s",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

        def again() -> bool:
            status = clean.status("team-a", "train")
            return status.get("attempts") == 2 and len(nodes_of(clean, "train")) == 2

        wait_for("the gang running again", again, timeout=120)
        status = clean.status("team-a", "train")
        assert (status["state"], status["retries"], status.get("exitCode")) == (
            "Running",
            0,
            None,
        ), status  # lost to the drain, not failed
        assert drained not in nodes_of(clean, "train")
        assert "Requeued" in clean.events("team-a", "train")
    finally:
        clean.kubectl("admin", "uncordon", drained)


@pytest.fixture
def stop_node(clean: Cluster) -> Iterator[Callable[[str], None]]:
    """`stop_node(node)` makes the node's kubelet go silent (KWOK stops managing it, its
    Ready condition False). Afterwards KWOK takes it back and it is Ready again."""
    core = k8s.client.CoreV1Api(clean.client())
    stopped: list[str] = []

    def stop(node: str) -> None:
        clean.kubectl("admin", "label", "node", node, f"{KWOK_LABEL}-")
        stopped.append(node)
        time.sleep(1)  # KWOK lets go of it before its condition is written
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletStopped",
            "message": "the test stopped this node's kubelet",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        core.patch_node_status(node, {"status": {"conditions": [ready]}})

    yield stop
    for node in stopped:
        clean.kubectl("admin", "label", "node", node, f"{KWOK_LABEL}=true", "--overwrite")

        def ready(node: str = node) -> bool:
            conditions = core.read_node(node).status.conditions or []
            return any(c.type == "Ready" and c.status == "True" for c in conditions)

        wait_for(f"{node} Ready again", ready, timeout=120)


def test_a_node_not_ready_keeps_its_pods_and_offers_its_free_gpus_to_nobody(
    clean: Cluster, stop_node: Callable[[str], None]
) -> None:
    assert clean.apply("bob", "team-a", training_job("resident", gpus=4)).returncode == 0
    clean.wait("team-a", "resident", "Running")
    (node,) = nodes_of(clean, "resident")
    stop_node(node)
    others = [f"fill{i}" for i in range(NODES.count - 1)]  # every other node full
    for name in others:
        assert clean.apply("bob", "team-a", training_job(name)).returncode == 0
    for name in others:
        clean.wait("team-a", name, "Running", timeout=90)
    assert node not in {n for name in others for n in nodes_of(clean, name)}

    # 4 GPUs are free only on the node that is not Ready: nobody gets them.
    assert clean.apply("bob", "team-a", training_job("waits", gpus=4)).returncode == 0
    time.sleep(12)  # six resyncs of the controller (2 s) and more
    assert clean.state("team-a", "waits") == "Pending"
    assert clean.pods("team-a", "waits") == []
    status = clean.status("team-a", "resident")  # what runs there is left alone
    assert (status["state"], status["attempts"]) == ("Running", 1), status
    assert [p.metadata.deletion_timestamp for p in clean.pods("team-a", "resident")] == [None]

    # The node back: its free GPUs are offered again.
    clean.kubectl("admin", "label", "node", node, f"{KWOK_LABEL}=true", "--overwrite")
    clean.wait("team-a", "waits", "Running", timeout=120)
    assert nodes_of(clean, "waits") == [node]
