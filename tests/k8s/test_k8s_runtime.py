"""The Kubernetes runtime on an in-memory cluster: admission of TrainingJobs, starts pinned
where the cycle decided, preemption with the grace period and requeue, what may never be
deleted, restart recovery from the status and the pods, and the cluster's facts (failures,
lost nodes, foreign pods) winning over memory."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from k8s_support import NAMESPACE, World, training_job

from caldera.core import Decisions, Evict, EvictReason
from caldera.k8s import ClusterUnavailable, Invalid, NamespaceBinding, QuotaExceeded, names, runtime
from caldera.model import JobState
from caldera.trainingjob_api import CHECKPOINT, NOMINATION, PROTECTED

GRACE = 120


def two_normals_on_a_full_hypernode() -> World:
    """Two 8-GPU nodes in one hypernode, each filled by a normal job that has run 10 min."""
    world = World().hypernode("a", "n", count=2).start()
    world.submit("small0")
    world.submit("small1")
    world.step()
    assert world.pinned("small0") + world.pinned("small1") == ["n-0", "n-1"]
    world.step(600)
    return world


def submit_large(world: World) -> None:
    world.submit(
        "big", type="large-job", tasks=2, gpus=8, topology={"mode": "hard", "highest_tier": 1}
    )
    world.step(1)


# -- admission ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "namespace", "fields", "want"),
    [
        ("ok-name", NAMESPACE, {"queue": "nope"}, "queue nope is not bound to namespace team"),
        ("ok-name", NAMESPACE, {"gpus": 0.5, "tasks": 2}, "fractional gpus"),
        ("ok-name", NAMESPACE, {"type": "critical"}, "may not submit critical jobs"),
        ("Bad_Name", NAMESPACE, {}, "not a DNS label"),
        ("x" * 41, NAMESPACE, {}, "longer than 40 characters"),
        ("ok-name", NAMESPACE, {"gpus": 16}, "no node in the cluster can host"),
        ("ok-name", NAMESPACE, {"template": {"spec": {"nodeName": "n-0"}}}, "nodeName is set"),
        (
            "ok-name",
            NAMESPACE,
            {"template": {"spec": {"hostNetwork": True}}},
            "may not use the host network",
        ),
        (
            "ok-name",
            NAMESPACE,
            {"template": {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}},
            "may not mount a hostPath volume",
        ),
        (
            "ok-name",
            NAMESPACE,
            {
                "template": {
                    "spec": {"containers": [{"name": "m", "securityContext": {"privileged": True}}]}
                }
            },
            "may not run a privileged container",
        ),
        (
            "ok-name",
            NAMESPACE,
            {"template": {"spec": {"serviceAccountName": "cluster-admin"}}},
            "service account the operator allows",
        ),
    ],
    ids=[
        "queue not bound to the namespace",
        "share for a gang",
        "critical from a namespace not allowed it",
        "not a DNS name",
        "name too long",
        "bigger than any node",
        "template pins a node",
        "host network",
        "hostPath",
        "privileged",
        "foreign service account",
    ],
)
def test_a_job_that_cannot_run_is_rejected_with_a_condition_and_an_event(
    name: str, namespace: str, fields: dict[str, Any], want: str
) -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit(name, namespace, **fields)
    world.step()
    assert world.state(name, namespace) == "Rejected"
    assert want in world.status(name, namespace)["reason"]
    assert world.condition(name, "Admitted", namespace) == ("False", "Rejected")
    assert world.condition(name, "Finished", namespace) == ("True", "Rejected")
    assert world.events(name, namespace) == ["Rejected"]
    assert world.pods(name, namespace) == []


def test_critical_is_accepted_only_from_namespaces_allowed_it() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("chat", "serving", type="critical", gpus=1)
    world.step()
    assert world.state("chat", "serving") == "Running"


def test_tasks_asking_for_different_resources_are_rejected() -> None:
    world = World().hypernode("a", "n", count=1).start()
    spec = training_job(tasks=1, gpus=8)
    spec["tasks"].append({"name": "ps", "replicas": 1, "gpus": 0, "template": {}})
    world.cluster.submit(NAMESPACE, "mixed", spec)
    world.step()
    assert "every replica must ask for the same GPUs" in world.status("mixed")["reason"]


def test_a_closed_queue_rejects() -> None:
    world = World(queues=[{"name": "team"}, {"name": "old", "state": "Closed"}])
    world.settings = replace(world.settings, namespaces={"team": NamespaceBinding(("team", "old"))})
    world.hypernode("a", "n", count=1).start()
    world.submit("late", queue="old")
    world.step()
    assert "queue 'old' is Closed" in world.status("late")["reason"]


def test_jobs_outside_the_served_namespaces_are_never_read() -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.cluster.submit("kube-system", "sysjob", training_job(tasks=2))
    world.cluster.submit("elsewhere", "job", training_job())
    world.step()
    assert world.job("sysjob", "kube-system").get("status") is None
    assert world.job("job", "elsewhere").get("status") is None
    assert world.cluster.pods == {}


# -- starting ----------------------------------------------------------------------------------


def test_a_start_creates_the_gang_pinned_where_the_cycle_placed_it() -> None:
    world = World().hypernode("a", "n", count=4).start()
    world.submit("gang", type="large-job", tasks=3, gpus=8, cpu=16, memory="64Gi")
    world.step()
    assert world.state("gang") == "Running"
    decided = [placement["node"] for placement in world.placements("gang")]
    assert world.pinned("gang") == decided
    assert len(set(decided)) == 3
    group = world.cluster.pod_groups[(NAMESPACE, "gang-1")]
    assert group["spec"]["minMember"] == 3
    assert (NAMESPACE, "gang") in world.cluster.services
    pods = world.pods("gang")
    assert all(p["status"]["phase"] == "Running" for p in pods)  # the fake bound the gang
    assert all(p["spec"]["terminationGracePeriodSeconds"] == GRACE for p in pods)
    assert all(p["metadata"]["ownerReferences"][0]["name"] == "gang" for p in pods)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob" for p in pods)
    assert world.condition("gang", "Running") == ("False", "Starting")  # pods created
    world.step()
    assert world.condition("gang", "Running") == ("True", "Running")  # pods running
    # A first start has no Event (issue 40): the conditions say where and in which queue.
    assert world.events("gang") == []
    admitted = world.status("gang")["conditions"]
    said = {c["type"]: c["message"] for c in admitted}
    assert said["Admitted"].startswith("queue ")
    assert said["Running"].startswith("attempt 1 on ") and said["Running"].endswith(
        ": 3 pod(s) running"
    )
    assert all(f"{node}:8" in said["Running"] for node in decided)
    assert world.status("gang")["gpus"] == "24"
    assert world.status("gang")["wait"] == "0s"


def test_useful_work_starts_when_the_containers_run_not_at_the_decision() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("late-bind")
    world.rt.step()  # decided and created, not bound yet
    assert world.rt.jobs[f"{NAMESPACE}/late-bind"].running_since is None
    world.cluster.advance(30)  # binds now: containers start at the fake's time
    world.rt.step()
    assert world.rt.jobs[f"{NAMESPACE}/late-bind"].running_since == world.cluster.clock.now


# -- preemption --------------------------------------------------------------------------------


def test_a_large_job_preempts_normal_jobs_with_the_grace_period_and_takes_their_nodes() -> None:
    world = two_normals_on_a_full_hypernode()
    submitted = {name: world.submitted_at(name) for name in ("small0", "small1")}
    submit_large(world)

    # Evicted: both pods evicted with the grace period, both jobs Releasing.
    assert world.cluster.deletions == [
        (NAMESPACE, "small0-1-0", GRACE),
        (NAMESPACE, "small1-1-0", GRACE),
    ]
    assert {world.state("small0"), world.state("small1")} == {"Releasing"}
    assert world.status("small0")["controller"]["evicted_for"] == f"{NAMESPACE}/big"
    assert world.condition("small0", "Preempted") == ("True", "Preempted")
    assert [a for a in world.cluster.actions if a[0] == "evict"] == [
        ("evict", "pod", f"{NAMESPACE}/small0-1-0"),
        ("evict", "pod", f"{NAMESPACE}/small1-1-0"),
    ]  # through the Eviction API
    assert world.events("small0")[-1] == "Preempted"
    nomination = world.nomination("big")
    assert nomination is not None
    assert sorted(nomination["victims"]) == [f"{NAMESPACE}/small0", f"{NAMESPACE}/small1"]
    assert world.throttles() == {
        "team": {"job": f"{NAMESPACE}/big", "since": pytest.approx(world.cluster.clock.now)}
    }

    # Inside the grace period the room stays with the victims: nothing starts.
    world.step(GRACE - 10)
    assert world.state("big") == "Pending"
    assert world.pods("big") == []
    assert {p["metadata"]["name"] for p in world.pods("small0")} == {"small0-1-0"}

    # Grace over: the kubelet removed the pods; victims requeued with their submit time,
    # the preemptor created on exactly the nodes it was promised.
    world.step(11)
    for name in ("small0", "small1"):
        status = world.status(name)
        assert status["state"] == "Pending"
        assert world.submitted_at(name) == submitted[name]
        assert status["evictions"] == 1
        assert status["lostGPUSeconds"] == pytest.approx(8 * 601)
        assert [e for e in world.events(name) if e != "Waiting"][-1] == "Requeued"
    world.step()  # its status follows its pods, once they run
    assert world.state("big") == "Running"
    assert world.pinned("big") == [p["node"] for p in nomination["placement"]]
    assert world.nomination("big") is None
    started_under = world.cluster.pod_groups[(NAMESPACE, "big-1")]["metadata"]["annotations"]
    assert json.loads(started_under[NOMINATION])["victims"] == nomination["victims"]
    assert world.throttles() == {}
    assert (NAMESPACE, "small0-1") not in world.cluster.pod_groups  # old attempt cleaned up


def test_a_victim_that_checkpoints_on_sigterm_frees_its_node_early() -> None:
    world = two_normals_on_a_full_hypernode()
    world.cluster.exit_on_sigterm(NAMESPACE, "small0-1-0", after=20)
    world.cluster.exit_on_sigterm(NAMESPACE, "small1-1-0", after=25)
    submit_large(world)
    world.step(30)
    world.step()  # its status follows its pods, once they run
    assert world.state("big") == "Running"
    assert world.state("small0") == "Pending"


def test_a_checkpoint_the_job_reports_on_its_pod_limits_the_lost_work() -> None:
    world = two_normals_on_a_full_hypernode()
    checkpoint_at = world.cluster.clock.now - 100  # 500 s of its 601 s are saved
    for pod in ("small0-1-0", "small1-1-0"):
        world.cluster.pod(NAMESPACE, pod)["metadata"]["annotations"][CHECKPOINT] = json.dumps(
            {"time": checkpoint_at}
        )
    world.step()
    submit_large(world)
    world.step(GRACE)
    assert world.status("small0")["controller"]["saved_work"] == pytest.approx(500)
    assert world.status("small0")["lostGPUSeconds"] == pytest.approx(8 * 101)


def test_only_the_tasks_above_min_available_give_way_when_that_is_enough() -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.submit("elastic", tasks=2, gpus=8, min_available=1)
    world.step(600)
    world.submit("big", type="large-job", tasks=1, gpus=8)
    world.step(1)
    assert len(world.cluster.deletions) == 1
    assert world.state("elastic") == "Running"
    world.step(GRACE)
    world.step()  # its status follows its pods, once they run
    assert world.state("big") == "Running"
    assert world.state("elastic") == "Running"
    assert len([p for p in world.pods("elastic") if p["status"]["phase"] == "Running"]) == 1


# -- never deleted -----------------------------------------------------------------------------


def test_a_critical_job_is_never_a_victim_the_large_job_waits() -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.submit("infer", "serving", type="critical", gpus=8)
    world.submit("small")
    world.step(600)
    submit_large(world)
    world.step(GRACE + 1)
    assert world.state("infer", "serving") == "Running"
    assert ("serving", "infer-1-0") not in {(ns, pod) for ns, pod, _ in world.cluster.deletions}
    assert world.state("big") == "Pending"


@pytest.mark.parametrize(
    ("namespace", "fields"),
    [("serving", {"type": "critical"}), (NAMESPACE, {"protected": True})],
    ids=["critical", "protected"],
)
def test_an_eviction_of_a_critical_or_protected_job_is_refused_even_if_asked(
    namespace: str, fields: dict[str, Any]
) -> None:
    world = World().hypernode("a", "n", count=1).start()
    job_id = world.submit("keep", namespace, **fields)
    world.step()
    snapshot = world.rt.snapshot(world.cluster.clock.now)
    world.rt.kernel.apply(
        Decisions(evictions=(Evict(job_id, EvictReason.PREEMPT, "someone", (), 8000),)), snapshot
    )
    world.rt.actuator.flush()
    assert world.cluster.deletions == []
    assert world.rt.kernel.stats.refused_evictions == 1
    assert world.state("keep", namespace) == "Running"


def test_protection_comes_from_the_job_not_from_labels_a_user_can_write() -> None:
    """Issue 10, defect 2: a running pod relabelled `protected=true` (or its template
    labelled so) is still evicted; the labels never reach the pod from the template."""
    world = World().hypernode("a", "n", count=2).start()
    world.submit("small0", template={"metadata": {"labels": {"protected": "true", "team": "x"}}})
    world.submit("small1")
    world.step(600)
    labels = world.pods("small0")[0]["metadata"]["labels"]
    assert "protected" not in labels and labels["team"] == "x"
    for pod in ("small0-1-0", "small1-1-0"):
        world.cluster.pod(NAMESPACE, pod)["metadata"]["labels"].update(
            {"protected": "true", PROTECTED: "true", "caldera.io/system": "true"}
        )
    submit_large(world)
    assert sorted(world.deleted()) == ["small0-1-0", "small1-1-0"]
    world.step(GRACE + 1)
    world.step()  # its status follows its pods, once they run
    assert world.state("big") == "Running"


def test_the_live_pod_is_checked_before_every_eviction(caplog: pytest.LogCaptureFixture) -> None:
    """Defence in depth: a pod that took a victim's name but belongs to someone else (another
    owner) is never removed."""
    world = two_normals_on_a_full_hypernode()
    for pod in ("small0-1-0", "small1-1-0"):
        world.cluster.pod(NAMESPACE, pod)["metadata"]["ownerReferences"][0]["uid"] = "other"
    submit_large(world)
    assert world.cluster.deletions == []
    assert world.rt.actuator.refused_deletes == 2
    assert f"pod {NAMESPACE}/small0-1-0 does not belong to job {NAMESPACE}/small0" in caplog.text
    assert {p["metadata"].get("deletionTimestamp") for p in world.cluster.pods.values()} == {None}


# -- restart -----------------------------------------------------------------------------------


def test_a_restarted_controller_recovers_nominations_throttles_and_releasing_victims() -> None:
    world = two_normals_on_a_full_hypernode()
    submit_large(world)
    promised = [p["node"] for p in (world.nomination("big") or {})["placement"]]
    before = world.rt
    big = before.jobs[f"{NAMESPACE}/big"]
    nomination, throttles = big.nomination, dict(before.throttles)
    releasing = {
        job_id: job.view().releasing for job_id, job in before.jobs.items() if job.releasing
    }
    deletions = list(world.cluster.deletions)

    after = world.restart()

    assert after.jobs[f"{NAMESPACE}/big"].nomination == nomination
    assert after.throttles == throttles
    assert {
        job_id: job.view().releasing for job_id, job in after.jobs.items() if job.releasing
    } == releasing
    assert world.cluster.deletions == deletions  # nothing signalled twice
    assert after.room.fingerprint() == before.room.fingerprint()

    world.step(GRACE + 1)
    assert world.state("big") == "Running"
    assert world.pinned("big") == promised
    assert world.throttles() == {}


class FailingDeletes:
    """Wraps the fake: deletes fail as if the API server went away mid-step."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)

    def delete_pod(self, *args: Any, **kwargs: Any) -> bool:
        raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: connection reset")

    def evict_pod(self, *args: Any, **kwargs: Any) -> bool:
        raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: connection reset")


def test_an_eviction_recorded_but_never_sent_is_sent_by_the_next_controller() -> None:
    world = two_normals_on_a_full_hypernode()
    world.rt.actuator.api = FailingDeletes(world.cluster)
    world.submit("big", type="large-job", tasks=2, gpus=8)
    world.cluster.advance(1)
    with pytest.raises(ClusterUnavailable):
        world.rt.step()
    assert world.state("small0") == "Releasing"  # written before the evictions went out
    assert world.cluster.deletions == []

    world.restart()
    assert sorted(world.deleted()) == ["small0-1-0", "small1-1-0"]
    world.step(GRACE + 1)
    assert world.state("big") == "Running"


def test_a_start_recorded_but_never_created_is_requeued_and_started_again() -> None:
    world = World().hypernode("a", "n", count=1).start()

    class FailingCreates(FailingDeletes):
        def create_pod(self, *args: Any, **kwargs: Any) -> Any:
            raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: timed out")

    world.rt.actuator.api = FailingCreates(world.cluster)
    world.submit("job")
    with pytest.raises(ClusterUnavailable):
        world.rt.step()
    assert world.state("job") == "Running"
    world.restart()  # the task's pod is missing: lost, requeued, started again
    world.step()
    assert world.state("job") == "Running"
    assert world.status("job")["attempts"] == 2
    assert world.pinned("job") == ["n-0"]


# -- the cluster's facts -----------------------------------------------------------------------


def test_all_pods_succeeding_finishes_the_job_and_cleans_up() -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.submit("train", tasks=2, gpus=8)
    world.step()
    for pod in ("train-1-0", "train-1-1"):
        world.cluster.finish(NAMESPACE, pod, 0)
    world.step()
    assert world.state("train") == "Succeeded"
    assert world.status("train")["exitCode"] == 0
    assert world.condition("train", "Finished") == ("True", "Succeeded")
    assert world.condition("train", "Succeeded") == ("True", "Succeeded")
    assert (NAMESPACE, "train-1") not in world.cluster.pod_groups
    assert (NAMESPACE, "train") not in world.cluster.services
    assert world.pods("train") == []  # finished pods are garbage-collected
    assert f"{NAMESPACE}/train" not in world.rt.jobs
    assert "controller" not in world.status("train")


@pytest.mark.parametrize(("retries", "want"), [(0, "Failed"), (1, "Running")])
def test_a_failed_member_stops_the_gang_then_fails_or_retries_it(retries: int, want: str) -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.submit("train", tasks=2, gpus=8, max_retries=retries)
    world.step()
    world.cluster.finish(NAMESPACE, "train-1-0", exit_code=3)
    world.step()
    assert world.deleted() == ["train-1-1"]  # the rest of the gang is stopped
    assert world.state("train") == "Running"
    world.step(GRACE)
    world.step()  # a restart's status follows its pods, at the next step
    assert world.state("train") == want
    if want == "Failed":
        assert world.status("train")["exitCode"] == 3
        assert world.status("train")["reason"] == "exited with code 3"
        assert world.condition("train", "Finished") == ("True", "Failed")
    else:
        assert world.status("train")["attempts"] == 2
        assert sorted(p["metadata"]["name"] for p in world.pods("train")) == [
            "train-2-0",
            "train-2-1",
        ]  # the failed attempt's pod was garbage-collected
        assert "Retrying" in world.events("train")


def test_a_lost_node_requeues_its_gang_and_it_restarts_elsewhere() -> None:
    world = World().hypernode("a", "n", count=3).start()
    world.submit("train", tasks=2, gpus=8)
    world.step()
    lost = world.pinned("train")[0]
    del world.cluster.nodes[lost]
    world.cluster.pods = {
        k: p for k, p in world.cluster.pods.items() if p["spec"].get("nodeName") != lost
    }
    world.step()
    world.step(GRACE)
    world.step()  # a restart's status follows its pods, at the next step
    assert world.state("train") == "Running"
    assert world.status("train")["attempts"] == 2
    assert lost not in world.pinned("train")[-2:]


def test_pods_caldera_did_not_create_and_cordoned_nodes_are_never_used() -> None:
    world = World().hypernode("a", "n", count=3)
    world.cluster.add_foreign_pod("other", "render-farm", "n-0", gpus=4)
    world.cluster.nodes["n-1"]["spec"]["unschedulable"] = True
    world.start()
    world.submit("whole")  # needs 8 GPUs of one node: only n-2 has them
    world.submit("half", gpus=4)  # n-0 has 4 left
    world.step()
    assert world.pinned("whole") == ["n-2"]
    assert world.pinned("half") == ["n-0"]


def test_a_start_volcano_never_binds_is_given_up_and_requeued() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job")
    world.rt.step()  # created; the node is cordoned before Volcano binds it
    world.cluster.nodes["n-0"]["spec"]["unschedulable"] = True
    world.step(world.settings.bind_timeout + 1)
    assert world.deleted() == ["job-1-0"]
    assert "StartTimeout" in world.events("job")
    world.step(1)
    assert world.state("job") == "Pending"


def test_a_deleted_job_stops_its_pods_and_their_room_returns_only_when_they_are_gone() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("first")
    world.step()
    world.cluster.delete_job(NAMESPACE, "first")  # the GC deletes the pod with grace
    world.submit("second")
    world.step()
    assert f"{NAMESPACE}/first" not in world.rt.jobs
    assert world.state("second") == "Pending"  # the old pod still holds the node
    world.step(GRACE)
    assert world.pods("second")  # started; its status follows its pods, at the next step
    world.step()
    assert world.state("second") == "Running"


def test_the_throttle_holds_small_submissions_until_the_large_job_runs() -> None:
    world = two_normals_on_a_full_hypernode()
    submit_large(world)
    world.submit("late")
    world.step()
    assert world.state("late") == "Held"
    assert world.status("late")["controller"]["hold_reason"] == "throttle"
    assert world.condition("late", "Held") == ("True", "Held")
    world.step(GRACE)
    world.step()  # its status follows its pods, once they run
    assert world.state("big") == "Running"
    assert world.state("late") == "Pending"
    assert world.condition("late", "Held") == ("False", "Released")
    assert world.rt.jobs[f"{NAMESPACE}/late"].state is JobState.PENDING


def test_a_drained_node_stops_the_gang_and_it_is_requeued_not_failed() -> None:
    world = World().hypernode("a", "n", count=3).start()
    world.submit("train", tasks=2, gpus=8)
    world.step()
    drained = world.pinned("train")[0]
    victim = next(p for p in world.pods("train") if p["spec"]["nodeName"] == drained)
    world.cluster.nodes[drained]["spec"]["unschedulable"] = True  # kubectl drain: cordon…
    world.cluster.delete_pod(NAMESPACE, victim["metadata"]["name"], 30)  # …then evict
    world.step()
    others = [p["metadata"]["name"] for p in world.pods("train") if p is not victim]
    assert world.deleted()[1:] == others  # the rest of the gang is stopped by caldera
    world.step(GRACE)
    world.step()
    assert world.state("train") == "Running"
    status = world.status("train")
    assert status["attempts"] == 2
    assert status.get("exitCode") is None  # lost, not failed
    assert drained not in world.pinned("train")[-2:]


def test_an_elastic_job_grows_onto_room_that_frees_up() -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.submit("blocker")
    world.step()
    world.submit("elastic", tasks=2, gpus=8, min_available=1)
    world.step()
    assert [p["metadata"]["name"] for p in world.pods("elastic")] == ["elastic-1-0"]
    world.cluster.finish(NAMESPACE, "blocker-1-0", 0)
    world.step()
    world.step()
    pods = world.pods("elastic")
    assert [p["metadata"]["name"] for p in pods] == ["elastic-1-0", "elastic-1-1"]
    assert pods[1]["metadata"]["annotations"][names.GROUP_NAME] == "elastic-1"  # same gang
    env = {e["name"]: e["value"] for e in pods[1]["spec"]["containers"][0]["env"]}
    assert (env["RANK"], env["MASTER_ADDR"]) == ("1", "elastic-0.elastic")
    assert world.status("elastic")["controller"]["tasks"] == 2


def test_an_eviction_budget_spreads_one_plan_over_cycles_and_the_plan_survives() -> None:
    world = World(policy={"eviction_budget": 0.3}).hypernode("a", "n", count=4).start()
    for i in range(4):
        world.submit(f"small{i}")
    world.step(600)
    world.submit(
        "big", type="large-job", tasks=4, gpus=8, topology={"mode": "hard", "highest_tier": 1}
    )
    world.step(1)
    first = len(world.cluster.deletions)
    assert 0 < first < 4  # the budget: not all four at once
    assert world.nomination("big") is not None
    world.run_until("big", "Running", dt=5)
    assert len(world.cluster.deletions) == 4
    assert {world.state(f"small{i}") for i in range(4)} == {"Pending"}


def test_a_device_plugin_restart_that_reports_no_gpus_for_a_moment_stops_nothing() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job")
    world.step()
    allocatable = world.cluster.nodes["n-0"]["status"]["allocatable"]
    allocatable["nvidia.com/gpu"] = "0"
    world.step(10)
    allocatable["nvidia.com/gpu"] = "8"
    world.step(10)
    assert world.cluster.deletions == []
    assert world.state("job") == "Running"
    world.submit("next")  # the node is full again in caldera's eyes
    world.step()
    assert world.state("next") == "Pending"


def test_an_empty_node_list_is_not_taken_for_a_vanished_cluster() -> None:
    world = World().hypernode("a", "n", count=2).start()
    world.submit("train", tasks=2, gpus=8)
    world.step()
    nodes, world.cluster.nodes = world.cluster.nodes, {}
    world.step(10)
    world.cluster.nodes = nodes
    world.step(10)
    assert world.cluster.deletions == []
    assert world.state("train") == "Running"
    assert world.status("train")["attempts"] == 1


def test_a_status_the_controller_cannot_read_leaves_the_pods_alone_and_their_room_taken() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job")
    world.step()
    world.job("job")["status"]["state"] = "Bogus"
    world.restart()
    world.submit("next")
    world.step(10)
    assert world.cluster.deletions == []
    assert world.state("next") == "Pending"


def test_a_restart_takes_the_tasks_back_from_the_pods() -> None:
    """Issue 9, defect 9: the status holds no per-task state; the pods carry it."""
    world = World().hypernode("a", "n", count=4).start()
    world.submit("gang", tasks=4, gpus=8)
    world.step()
    world.step(60)
    assert "tasks" not in world.status("gang")["controller"] or isinstance(
        world.status("gang")["controller"]["tasks"], int
    )
    before = world.rt.jobs[f"{NAMESPACE}/gang"].view()
    after = world.restart().jobs[f"{NAMESPACE}/gang"].view()
    assert (after.placement, after.state, after.running_since) == (
        before.placement,
        before.state,
        before.running_since,
    )
    assert world.cluster.deletions == []
    world.step(60)
    assert world.state("gang") == "Running"
    assert world.status("gang")["attempts"] == 1


def test_a_quota_refusal_is_not_now_and_spends_no_retry() -> None:
    """Issue 9, defect 3: a ResourceQuota 403 on pod create requeued, not failed."""
    world = World().hypernode("a", "n", count=1).start()
    world.cluster.create_errors.append(
        QuotaExceeded('create pod team/job-1-0: pods "job-1-0" is forbidden: exceeded quota')
    )
    world.submit("job")
    world.step()
    assert world.state("job") == "Pending"
    assert "CreateRefused" in world.events("job")
    world.step(1)
    world.step()  # a restart's status follows its pods, at the next step
    status = world.status("job")
    assert (status["state"], status["attempts"], status["retries"]) == ("Running", 2, 0)


def test_a_pod_group_volcano_refuses_for_its_queue_creates_no_pod_and_waits() -> None:
    """Issue 10, defect 5: Volcano (>= 1.12) refuses a PodGroup whose Queue is missing or
    not Open; caldera logged it and still created the pods, which Volcano never schedules."""
    world = World().hypernode("a", "n", count=1)
    world.cluster.volcano_admission = True
    world.start()
    world.cluster.queues["team"] = {"metadata": {"name": "team"}, "status": {"state": "Closed"}}
    world.submit("job")
    world.step()
    assert world.pods("job") == []
    assert world.cluster.pod_groups == {}
    assert "PodGroupRefused" in world.events("job")
    status = world.status("job")
    assert (status["state"], status["retries"]) == ("Pending", 0)
    attempts = status["attempts"]
    for _ in range(5):  # it waits for the queue: no start is tried again meanwhile
        world.step(1)
    assert world.status("job")["attempts"] == attempts and world.pods("job") == []
    world.cluster.queues["team"]["status"] = {"state": "Open"}  # Volcano opens it
    world.step(6)
    world.step(1)
    status = world.status("job")
    assert (status["state"], status["retries"]) == ("Running", 0)
    assert len(world.pods("job")) == 1


def test_a_pod_group_refused_for_another_reason_fails_the_start() -> None:
    """Refused with its queue Open: the job's own fault, as a refused pod is."""
    world = World().hypernode("a", "n", count=1).start()
    world.cluster.queues["team"] = {"metadata": {"name": "team"}, "status": {"state": "Open"}}
    original = world.cluster.create_pod_group

    def refuse(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        raise Invalid("create podgroup: admission webhook denied the request: bad topology")

    world.cluster.create_pod_group = refuse  # type: ignore[method-assign]
    world.submit("job", maxRetries=0)
    world.step()
    world.step(1)
    world.cluster.create_pod_group = original  # type: ignore[method-assign]
    assert world.pods("job") == []
    assert world.state("job") == "Failed"
    assert "bad topology" in world.status("job")["reason"]


def test_a_refused_create_fails_the_job_with_the_servers_words() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.cluster.create_errors.append(Invalid("admission webhook denied the pod"))
    world.submit("job")
    world.step()
    world.step(1)
    assert world.state("job") == "Failed"
    assert "admission webhook denied the pod" in world.status("job")["reason"]


def test_a_victim_stuck_terminating_is_forced_then_left_behind_and_the_preemptor_replanned() -> (
    None
):
    """Issue 9, defect 6: a victim whose pod never goes (a finalizer; a node that never
    confirms) held its preemptor Pending forever."""
    world = World().hypernode("a", "n", count=2).start()
    world.submit("small0")
    world.submit("small1")
    world.step()
    world.step(600)
    world.submit("big", type="large-job", tasks=1, gpus=8)
    world.step(1)
    ((namespace, stuck, _),) = world.cluster.deletions
    victim = stuck.rsplit("-", 2)[0]
    other = "small1" if victim == "small0" else "small0"
    world.cluster.pods[(namespace, stuck)]["metadata"]["finalizers"] = ["example.com/hold"]
    timeout = world.settings.terminating_timeout

    world.step(GRACE + 1)  # the grace period is over; the pod is still there
    assert world.state(victim) == "Releasing" and world.state("big") == "Pending"
    world.step(timeout)  # escalation: deleted again, with grace 0
    assert world.cluster.deletions[-1] == (namespace, stuck, 0)
    assert world.events(victim)[-1] == "StuckTerminating"
    assert world.state(victim) == "Releasing"

    world.step(timeout)  # still there: the job moves on without it
    assert world.state(victim) == "Pending"
    assert (namespace, stuck) in world.cluster.pods  # its room is still taken
    world.step(1)  # the cycle re-plans the preemptor: the other job gives way
    assert world.state(other) == "Releasing"
    world.step(GRACE + 1)
    world.step()  # its status follows its pods, at the next step
    assert world.state("big") == "Running"
    assert world.pinned("big") != [world.cluster.pods[(namespace, stuck)]["spec"]["nodeName"]]

    del world.cluster.pods[(namespace, stuck)]["metadata"]["finalizers"]
    world.step(1)  # the pod is gone at last: its room comes back
    world.step(1)
    assert {world.state(victim), world.state(other)} == {"Running", "Pending"}


def test_an_eviction_a_disruption_budget_refuses_is_rolled_back_and_the_preemptor_replanned() -> (
    None
):
    """Issue 10: the Eviction API's 429 (a PodDisruptionBudget) left the victim Releasing
    and its preemptor waiting forever. Now the victim runs on, untouched, and the preemptor
    plans again: the victim's cooldown sends it to the other job."""
    world = World().hypernode("a", "n", count=2).start()
    world.submit("small0")
    world.step()
    world.step(600)
    world.submit("small1")  # started later: less work to lose, so the first victim chosen
    world.step()
    world.step(600)
    world.cluster.blocked_evictions.add((NAMESPACE, "small1-1-0"))
    world.submit("big", type="large-job", tasks=1, gpus=8)
    world.step(1)

    assert [a for a in world.cluster.actions if a[0] == "evict"] == []  # refused, not done
    assert world.state("small1") == "Running"
    assert world.events("small1")[-2:] == ["Preempted", "EvictionRefused"]
    assert world.condition("small1", "Preempted") == ("False", "EvictionRefused")
    assert world.condition("small1", "Running") == ("True", "Running")  # its work goes on
    job = world.rt.jobs[names.job_id(NAMESPACE, "small1")]
    assert job.running_since is not None and job.work_done(world.cluster.clock.now) >= 600
    assert world.status("small1")["evictions"] == 0
    assert (NAMESPACE, "small1-1-0") in world.cluster.pods
    assert "deletionTimestamp" not in world.cluster.pods[(NAMESPACE, "small1-1-0")]["metadata"]

    world.step(1)  # re-planned: the other job gives way
    assert world.state("small0") == "Releasing"
    world.step(GRACE + 1)
    world.step()  # its status follows its pods, once they run
    assert world.state("big") == "Running"
    assert world.pinned("big") != world.pinned("small1")
    assert world.state("small1") == "Running" and world.status("small1")["evictions"] == 0


def test_a_cancel_a_disruption_budget_refuses_deletes_the_pods_instead() -> None:
    """A user's own cancel is not a disruption a budget may stop (as `kubectl delete`)."""
    world = World().hypernode("a", "n", count=1).start()
    world.submit("mine")
    world.step()
    world.cluster.blocked_evictions.add((NAMESPACE, "mine-1-0"))
    world.rt.kernel.cancel(world.rt.jobs[names.job_id(NAMESPACE, "mine")], world.cluster.clock.now)
    world.rt.actuator.flush()
    assert world.cluster.deletions == [(NAMESPACE, "mine-1-0", GRACE)]
    world.step(GRACE + 1)
    assert world.state("mine") == "Cancelled"


def test_a_gang_that_lost_pods_to_an_eviction_before_the_refusal_is_stopped_whole() -> None:
    """The budget refuses the second pod of a 2-pod gang after the first went: the gang
    cannot run whole, so the refused pod is deleted (not rolled back) and the job requeued."""
    world = World().hypernode("a", "n", count=2).start()
    world.submit("gang", tasks=2, gpus=8)
    world.step()
    world.step(600)
    world.cluster.blocked_evictions.add((NAMESPACE, "gang-1-1"))
    world.submit("big", type="large-job", tasks=2, gpus=8)
    world.step(1)
    assert [a for a in world.cluster.actions if a[0] == "evict"] == [
        ("evict", "pod", f"{NAMESPACE}/gang-1-0")
    ]
    assert (NAMESPACE, "gang-1-1", GRACE) in world.cluster.deletions  # deleted instead
    assert world.events("gang")[-1] == "EvictionRefused"
    world.step(GRACE + 1)
    assert world.state("gang") == "Pending"
    world.step(1)
    assert world.state("big") == "Running"


def test_a_controller_gone_between_a_start_s_pods_and_its_status_starts_the_job_anew() -> None:
    """Issue 40: a waiting job's start has its status follow its pods. Should the controller
    stop in between, its successor finds the job Pending beside pods of an attempt its status
    does not name: orphans, deleted, their room held until they are gone; the job starts
    again as a later attempt under other names, and the node is never booked twice."""
    world = World().one_waits_for_another()
    world.cluster.finish(NAMESPACE, "first-1-0")
    world.step()
    (orphan,) = [p["metadata"]["name"] for p in world.pods("second")]
    assert orphan == "second-1-0" and world.state("second") == "Pending"  # its status to come

    after = world.restart()
    job = after.jobs[f"{NAMESPACE}/second"]
    assert job.attempts == 1 and not job.tasks  # not its pod: its status never named it
    assert orphan in world.deleted()
    assert world.state("second") == "Pending"  # the orphan's room is held until it is gone
    world.step(GRACE + 1)
    world.step()
    assert world.state("second") == "Running"
    assert [p["metadata"]["name"] for p in world.pods("second")] == ["second-2-0"]
    assert world.status("second")["attempts"] == 2


def test_a_long_step_says_where_its_time_went(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator whose admissions lag during a burst reads in the log how long a long step
    read, decided and wrote; a short step says nothing."""
    world = World().hypernode("a", "n", count=1).start()
    world.submit("one", gpus=1)
    caplog.set_level("INFO", logger="caldera.k8s")
    monkeypatch.setattr(runtime, "LONG_STEP", 60.0)  # far above a step here, even loaded
    world.step()
    assert "a long step" not in caplog.text
    monkeypatch.setattr(runtime, "LONG_STEP", 0.0)
    world.submit("two", gpus=1)
    world.step()
    said = [r.getMessage() for r in caplog.records if "a long step" in r.getMessage()]
    assert len(said) == 1 and "reading" in said[0] and "deciding" in said[0], said
    assert said[0].endswith("; 2 jobs"), said
