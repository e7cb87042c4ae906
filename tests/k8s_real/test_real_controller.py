"""`caldera k8s run` against the real API server, end to end (issue 9, deliverable 4): users
apply TrainingJobs with kubectl, wait on their conditions, read their Events; the controller
runs as users run it (the CLI in its own process, the admin kubeconfig).

Binding: kube-scheduler binds the pods, honouring caldera's required node affinity (a pod
binds only on the node caldera chose), but pod by pod: Volcano's all-or-nothing gang binding
is not part of this control plane (caldera.devcluster). What "all or nothing" means here
is caldera's own: a gang's pods are created only when all of them have room, and a gang one
of whose pods cannot run is stopped whole.

Time is compressed: the grace period is 3 s, KWOK completes a pod after its annotated
duration, bind/ready timeouts are 20 s.
"""

from __future__ import annotations

import json
import time

from caldera_support import GRACE, Cluster, training_job
from real_support import wait_for

from caldera.trainingjob_api import PLACEMENT, PLURAL

FULL = 4  # replicas x 8 GPUs that fill the session's cluster


def test_a_gang_applied_with_kubectl_runs_on_the_nodes_caldera_chose_then_succeeds(
    clean: Cluster,
) -> None:
    job = training_job("train", replicas=2, annotations={"caldera.io/kwok-run-for": "6s"})
    done = clean.apply("alice", "team-a", job)
    assert done.returncode == 0, done.stderr
    clean.wait("team-a", "train", "Running")
    pods = clean.pods("team-a", "train")
    assert len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
    for pod in pods:
        decided = json.loads(pod.metadata.annotations[PLACEMENT])["node"]
        assert pod.spec.node_name == decided  # bound where caldera decided, nowhere else
    assert len({p.spec.node_name for p in pods}) == 2  # 8 GPUs each: one node each
    # admitted and started: no Event, the conditions say where it runs (issue 40)
    assert clean.events("team-a", "train") == []
    running = clean.condition("team-a", "train", "Running")
    assert running is not None and running[2].startswith("attempt 1 on "), running
    # the restart state is one field to the API server's field manager, not one per leaf:
    # every status write is cheaper to it (issue 40)
    tracked = [
        entry["fieldsV1"]["f:status"]["f:controller"]
        for entry in clean.job("team-a", "train")["metadata"]["managedFields"]
        if "f:controller" in (entry.get("fieldsV1") or {}).get("f:status", {})
    ]
    assert tracked == [{}], tracked
    clean.wait("team-a", "train", "Succeeded")
    status = clean.status("team-a", "train")
    assert (status["state"], status["exitCode"], status["attempts"]) == ("Succeeded", 0, 1)
    assert "controller" not in status
    wait_for("finished pods garbage-collected", lambda: clean.pods("team-a", "train") == [])
    # Events follow the status and the clean-up in each step: wait for it, as a user would.
    wait_for(
        "the Succeeded event last",
        lambda: clean.events("team-a", "train")[-1:] == ["Succeeded"],
        timeout=20,
    )


def test_a_large_job_preempts_a_normal_gang_which_gets_its_grace_period_then_resumes(
    clean: Cluster,
) -> None:
    assert clean.apply("bob", "team-a", training_job("filler", replicas=FULL)).returncode == 0
    clean.wait("team-a", "filler", "Running")
    large = training_job("large", type="large-job", annotations={"caldera.io/kwok-run-for": "5s"})
    assert clean.apply("alice", "team-a", large).returncode == 0

    def evicted() -> list[object] | None:
        pods = clean.pods("team-a", "filler")
        return pods if pods and all(p.metadata.deletion_timestamp for p in pods) else None

    victims = wait_for("the filler's pods evicted", evicted)
    assert {p.metadata.deletion_grace_period_seconds for p in victims} == {GRACE}
    for pod in victims:  # through the Eviction API: the pods say why they go
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        assert conditions.get("DisruptionTarget") == "True", pod.status.conditions
    clean.wait("team-a", "large", "Running")
    # Started only once the victims on its node were gone: deleted, or ended (a pod that has
    # exited holds no room for the scheduler either, even before its object is removed).
    (pod,) = clean.pods("team-a", "large")
    node = json.loads(pod.metadata.annotations[PLACEMENT])["node"]
    left = {
        p.metadata.name: p.status.phase
        for p in clean.pods("team-a", "filler")
        if p.spec.node_name == node
    }
    assert set(left.values()) <= {"Succeeded", "Failed"}, left
    preempted = clean.condition("team-a", "filler", "Preempted")
    assert preempted is not None and "by team-a/large" in preempted[2]
    clean.wait("team-a", "large", "Succeeded")
    wait_for("filler resumed", lambda: clean.status("team-a", "filler").get("attempts") == 2)
    clean.wait("team-a", "filler", "Running")
    status = clean.status("team-a", "filler")
    assert (status["evictions"], status["attempts"]) == (1, 2)
    events = clean.events("team-a", "filler")
    # "Admitted" is its own Event only when the start came in a later step; a first start
    # has none (its conditions say it)
    said = [e for e in events if e != "Admitted"]
    assert said[:2] == ["Preempted", "Requeued"], events
    assert "Resumed" in said[2:], events


def test_a_critical_job_starts_within_its_slo_and_is_never_a_victim(clean: Cluster) -> None:
    assert clean.apply("bob", "team-a", training_job("filler", replicas=FULL)).returncode == 0
    clean.wait("team-a", "filler", "Running")
    began = time.time()
    chat = training_job("chat", gpus=8, type="critical")
    assert clean.apply("alice", "serving", chat).returncode == 0
    clean.wait("serving", "chat", "Running")
    took = time.time() - began
    assert took < 60, f"critical started after {took:.0f} s (SLO 60 s)"
    # A large job that would need the whole cluster cannot take the critical job's node.
    clean.kubectl("admin", "-n", "team-a", "delete", PLURAL, "filler", "--wait=false")
    big = training_job("big", replicas=FULL, type="large-job")
    assert clean.apply("alice", "team-a", big).returncode == 0
    time.sleep(GRACE + 6)
    assert clean.state("team-a", "big") == "Pending"
    assert clean.condition("serving", "chat", "Preempted") is None
    assert [p.metadata.deletion_timestamp for p in clean.pods("serving", "chat")] == [None]
    assert clean.state("serving", "chat") == "Running"


def test_a_controller_killed_mid_preemption_loses_nothing(clean: Cluster) -> None:
    assert clean.apply("bob", "team-a", training_job("filler", replicas=FULL)).returncode == 0
    clean.wait("team-a", "filler", "Running")
    large = training_job("large", type="large-job")
    assert clean.apply("alice", "team-a", large).returncode == 0
    wait_for("filler Releasing", lambda: clean.state("team-a", "filler") == "Releasing")
    clean.restart_controller()  # SIGKILL: no clean shutdown
    clean.wait("team-a", "large", "Running", timeout=90)
    wait_for("filler Pending again", lambda: clean.state("team-a", "filler") == "Pending")
    status = clean.status("team-a", "filler")
    assert (status["evictions"], status["attempts"]) == (1, 1)  # evicted once, not twice
    assert clean.status("team-a", "large")["attempts"] == 1


def test_an_api_server_restart_loses_nothing(clean: Cluster) -> None:
    assert clean.apply("bob", "team-a", training_job("before", replicas=2)).returncode == 0
    clean.wait("team-a", "before", "Running")
    away = clean.dev.restart_apiserver()
    assert away < 60
    assert clean.proc is not None
    if clean.proc.poll() is not None:
        # Away longer than the renew deadline (4 s here): the leader could not renew its Lease
        # and stepped down, as client-go's controllers do; a Deployment starts it again.
        assert "lost the leader lease" in clean.log_tail(), clean.log_tail()
        clean.start_controller()
    assert clean.apply("bob", "team-a", training_job("after", replicas=2)).returncode == 0
    clean.wait("team-a", "after", "Running", timeout=90)
    status = clean.status("team-a", "before")
    assert (status["state"], status["attempts"], status["evictions"]) == ("Running", 1, 0)
