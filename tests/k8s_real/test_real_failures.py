"""What the controller does when the cluster does not do what it is asked (issue 10), on the
real control plane: a victim whose pod never goes (issue 9, defect 6: its preemptor waited
forever), a ResourceQuota refusing a gang's pod (defect 3: the job failed for good), pods a
user labels protected (defect 2: the preemptor waited for an hour)."""

from __future__ import annotations

from typing import Any

import kubernetes
from caldera_support import Cluster, training_job
from real_support import wait_for

k8s: Any = kubernetes

HOLD = {"metadata": {"finalizers": ["example.com/hold"]}}
LET_GO = {"metadata": {"finalizers": None}}
FILLERS = [f"fill{i}" for i in range(4)]  # one 8-GPU job per node: the cluster is full


def test_a_victim_stuck_terminating_is_forced_then_left_behind_and_its_preemptor_replanned(
    clean: Cluster,
) -> None:
    core = k8s.client.CoreV1Api(clean.client())
    for name in FILLERS:
        assert clean.apply("bob", "team-a", training_job(name)).returncode == 0
    for name in FILLERS:
        clean.wait("team-a", name, "Running")
    pods = {name: clean.pods("team-a", name)[0].metadata.name for name in FILLERS}
    for pod in pods.values():  # whichever the cycle picks, its pod will not go
        core.patch_namespaced_pod(pod, "team-a", HOLD)
    stuck = ""
    try:
        assert clean.apply("alice", "team-a", training_job("big", type="large-job")).returncode == 0

        def releasing() -> str | None:
            return next((n for n in FILLERS if clean.state("team-a", n) == "Releasing"), None)

        victim = wait_for("a victim", releasing)
        stuck = pods[victim]
        for name, pod in pods.items():  # only the victim's pod stays stuck
            if name != victim:
                core.patch_namespaced_pod(pod, "team-a", LET_GO)
        # grace 3 s, then terminating_timeout (5 s): deleted again with grace 0; still there
        # after another 5 s (the finalizer): the job moves on, the preemptor is re-planned.
        wait_for(
            "the StuckTerminating event",
            lambda: "StuckTerminating" in clean.events("team-a", victim),
        )
        clean.wait("team-a", "big", "Running", timeout=90)
        held = core.read_namespaced_pod(stuck, "team-a")
        assert held.metadata.deletion_timestamp is not None  # still there, still terminating
        wait_for(
            "big bound",
            lambda: [bool(p.spec.node_name) for p in clean.pods("team-a", "big")] == [True],
        )
        (big,) = clean.pods("team-a", "big")
        assert big.spec.node_name != held.spec.node_name  # planned around the stuck pod
        assert clean.state("team-a", victim) in ("Pending", "Running")  # requeued, not lost
        assert clean.status("team-a", victim)["evictions"] == 1
    finally:
        for pod in pods.values():
            try:
                core.patch_namespaced_pod(pod, "team-a", LET_GO)
            except k8s.client.ApiException as error:
                if error.status != 404:
                    raise


def test_a_resource_quota_refusal_requeues_the_gang_without_spending_a_retry(
    clean: Cluster,
) -> None:
    """Issue 9, defect 3: a ResourceQuota's 403 on pod create failed the job for good."""
    core = k8s.client.CoreV1Api(clean.client())
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    core.create_namespaced_resource_quota("team-a", quota)
    try:
        wait_for(  # the quota controller has counted it: admission enforces it from now on
            "the quota's status",
            lambda: core.read_namespaced_resource_quota("gpus", "team-a").status.hard or {},
        )
        # Two pods of 8 GPUs: the API server admits the first and refuses the second.
        gang = training_job("quota", replicas=2, maxRetries=0)
        assert clean.apply("bob", "team-a", gang).returncode == 0
        wait_for(
            "the CreateRefused event",
            lambda: "CreateRefused" in clean.events("team-a", "quota"),
        )
        status = clean.status("team-a", "quota")
        assert status["state"] != "Failed" and status["retries"] == 0, status
    finally:
        core.delete_namespaced_resource_quota("gpus", "team-a")
    clean.wait("team-a", "quota", "Running", timeout=90)  # the namespace has room again
    status = clean.status("team-a", "quota")
    assert (status["state"], status["retries"]) == ("Running", 0)


PROTECTING = {"caldera.io/protected": "true", "protected": "true", "caldera.io/system": "true"}


def test_labels_a_user_writes_on_their_pods_do_not_stop_a_preemption(clean: Cluster) -> None:
    """Issue 9, defect 2: template labels were merged into pod labels and the guard refused
    to evict pods labelled protected, retrying forever: the preemptor waited for an hour."""
    core = k8s.client.CoreV1Api(clean.client())
    filler = training_job("filler", replicas=4)  # fills the cluster
    filler["spec"]["tasks"][0]["template"]["metadata"] = {"labels": {**PROTECTING, "team": "x"}}
    assert clean.apply("bob", "team-a", filler).returncode == 0
    clean.wait("team-a", "filler", "Running")
    for pod in clean.pods("team-a", "filler"):
        labels = pod.metadata.labels
        assert labels["team"] == "x" and not set(PROTECTING) & set(labels), labels
        # Someone who may edit pods labels them protected now: it changes nothing either.
        core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"labels": PROTECTING}})
    assert clean.apply("alice", "team-a", training_job("big", type="large-job")).returncode == 0
    clean.wait("team-a", "big", "Running", timeout=90)
    preempted = clean.condition("team-a", "filler", "Preempted")
    assert preempted is not None and "by team-a/big" in preempted[2]


TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}


def test_a_start_the_scheduler_never_binds_is_given_up_and_requeued(clean: Cluster) -> None:
    """A taint caldera does not know about: the scheduler refuses the pod caldera pinned, so
    after `bind_timeout` (20 s here) the start is given up and the job requeued, not lost;
    once the taint is gone it runs."""
    core = k8s.client.CoreV1Api(clean.client())
    nodes = [n.metadata.name for n in core.list_node(label_selector="caldera.io/kwok=true").items]
    for node in nodes:
        core.patch_node(node, {"spec": {"taints": [TAINT]}})
    try:
        assert clean.apply("bob", "team-a", training_job("unbound")).returncode == 0
        wait_for(
            "the StartTimeout event",
            lambda: "StartTimeout" in clean.events("team-a", "unbound"),
            timeout=120,
        )
        assert clean.state("team-a", "unbound") in ("Pending", "Running")  # requeued, retried
        assert clean.status("team-a", "unbound")["retries"] == 0
    finally:
        for node in nodes:
            core.patch_node(node, {"spec": {"taints": None}})
    clean.wait("team-a", "unbound", "Running", timeout=90)
    wait_for(
        "its pod bound",
        lambda: any(p.spec.node_name for p in clean.running_pods("team-a", "unbound")),
        timeout=90,
    )


def test_an_eviction_a_disruption_budget_refuses_is_rolled_back_and_the_preemptor_replanned(
    clean: Cluster,
) -> None:
    """Issue 10: the Eviction API's 429 from a PodDisruptionBudget left the victim Releasing
    and its preemptor waiting forever. Three fillers are guarded by a real PDB
    (maxUnavailable 0); one older filler is not. The guarded ones have less work to lose, so
    the cycle picks them first: each refusal is rolled back (the job runs on, its pod
    untouched, an EvictionRefused Event) and the preemptor re-planned, until it evicts the
    unguarded filler and runs on that node.

    The budget is an integer `minAvailable`: with `maxUnavailable` or a percentage the
    disruption controller looks for the pods' owner's scale subresource, which a TrainingJob
    has not ("no matches for kind TrainingJob"), never computes the budget, and the Eviction
    API refuses every eviction it covers (also rolled back, but the preemptor could not run)."""
    policy = k8s.client.PolicyV1Api(clean.client())
    budget = {
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"guarded": "yes"}}},
    }
    policy.create_namespaced_pod_disruption_budget("team-a", budget)
    try:
        assert clean.apply("bob", "team-a", training_job("old")).returncode == 0
        clean.wait("team-a", "old", "Running")
        guarded = FILLERS[:3]
        for name in guarded:
            job = training_job(name)
            job["spec"]["tasks"][0]["template"]["metadata"] = {"labels": {"guarded": "yes"}}
            assert clean.apply("bob", "team-a", job).returncode == 0
        for name in guarded:
            clean.wait("team-a", name, "Running")

        def counted() -> bool:  # the disruption controller has counted the guarded pods
            status = policy.read_namespaced_pod_disruption_budget("guard", "team-a").status
            return (status.current_healthy, status.disruptions_allowed) == (3, 0)

        wait_for("the budget's status", counted)
        pods = {n: clean.pods("team-a", n)[0] for n in guarded}
        assert clean.apply("alice", "team-a", training_job("big", type="large-job")).returncode == 0
        clean.wait("team-a", "big", "Running", timeout=90)
        wait_for(
            "big bound",
            lambda: [bool(p.spec.node_name) for p in clean.pods("team-a", "big")] == [True],
        )
        (big,) = clean.pods("team-a", "big")
        refused = [n for n in guarded if "EvictionRefused" in clean.events("team-a", n)]
        assert refused, "no guarded filler was tried first: the test shows nothing"
        for name in guarded:  # every one of them runs on, in the very same pod
            (pod,) = clean.pods("team-a", name)
            assert pod.metadata.uid == pods[name].metadata.uid
            assert pod.metadata.deletion_timestamp is None
            status = clean.status("team-a", name)
            assert (status["state"], status["evictions"]) == ("Running", 0), status
        for name in refused:
            preempted = clean.condition("team-a", name, "Preempted")
            assert preempted is not None and preempted[:2] == ("False", "EvictionRefused")
        assert big.spec.node_name not in {p.spec.node_name for p in pods.values()}
        assert clean.status("team-a", "old")["evictions"] == 1
    finally:
        policy.delete_namespaced_pod_disruption_budget("guard", "team-a")
