"""What the controller does about pods that do not behave (issue 10), on the real control
plane: a bound pod whose image never pulls (issue 9, defect 7: it held its GPUs forever), a
pod with the name caldera needs that someone else made (defect 10: a 409 was taken as
"already mine"), and a controller restart with a gang running (defect 9: per-task state was
in one annotation; after a restart every pod of the job was deleted and it restarted from
attempt 1)."""

from __future__ import annotations

from typing import Any

import kubernetes
from caldera_support import Cluster, training_job
from hostile_support import event_messages
from real_support import wait_for

from caldera.k8s import names

k8s: Any = kubernetes


def test_a_bound_pod_whose_image_never_pulls_is_given_up_after_ready_timeout(
    clean: Cluster,
) -> None:
    """KWOK holds the pod bound, its container waiting in ImagePullBackOff (the stage
    `caldera.io/kwok-image-pull: fail`). After `ready_timeout` (20 s here) the start is given
    up as Kueue's waitForPodsReady does: a NotReady Event naming the reason, the pod deleted
    (its GPUs back), the job requeued without spending a retry."""
    job = training_job("nopull", annotations={"caldera.io/kwok-image-pull": "fail"})
    assert clean.apply("bob", "team-a", job).returncode == 0
    first = names.pod_name("nopull", 1, 0)

    def waiting() -> bool:
        pods = [p for p in clean.pods("team-a", "nopull") if p.metadata.name == first]
        statuses = pods[0].status.container_statuses if pods else None
        return bool(statuses) and statuses[0].state.waiting.reason == "ImagePullBackOff"

    wait_for("the first pod in ImagePullBackOff", waiting)
    wait_for(
        "the NotReady event",
        lambda: event_messages(clean, "team-a", "nopull", "NotReady"),
        timeout=120,
    )
    (said, *_) = event_messages(clean, "team-a", "nopull", "NotReady")
    assert f"pod {first} not running 20 s after its start (ImagePullBackOff)" in said, said
    wait_for(
        "the first pod gone",
        lambda: all(p.metadata.name != first for p in clean.pods("team-a", "nopull")),
    )
    status = clean.status("team-a", "nopull")
    assert status["retries"] == 0 and status["state"] in ("Pending", "Running"), status
    wait_for("a second attempt", lambda: clean.status("team-a", "nopull")["attempts"] >= 2)


def test_a_same_named_pod_the_controller_does_not_own_is_left_alone(clean: Cluster) -> None:
    """Someone made a pod with the name of the job's first pod. The create answers 409; the
    controller reads the pod, sees it is not its own, leaves it alone (CreateRefused) and
    starts the job again under the next attempt's names."""
    core = k8s.client.CoreV1Api(clean.client())
    squatter = names.pod_name("taken", 1, 0)
    body = {
        "metadata": {"name": squatter, "labels": {"owner": "someone-else"}},
        "spec": {
            "containers": [{"name": "x", "image": "example/other:v1"}],
            "nodeSelector": {"example.com/nowhere": "true"},  # never scheduled, holds nothing
        },
    }
    created = core.create_namespaced_pod("team-a", body)
    try:
        assert clean.apply("bob", "team-a", training_job("taken")).returncode == 0
        wait_for(
            "the CreateRefused event",
            lambda: event_messages(clean, "team-a", "taken", "CreateRefused"),
        )
        (said, *_) = event_messages(clean, "team-a", "taken", "CreateRefused")
        assert f"pod {squatter} already exists and is not this job's" in said, said
        clean.wait("team-a", "taken", "Running", timeout=90)
        status = clean.status("team-a", "taken")
        assert (status["attempts"], status["retries"]) == (2, 0), status
        mine = clean.running_pods("team-a", "taken")
        assert [p.metadata.name for p in mine] == [names.pod_name("taken", 2, 0)]
        still = core.read_namespaced_pod(squatter, "team-a")
        assert still.metadata.uid == created.metadata.uid
        assert still.metadata.deletion_timestamp is None
    finally:
        core.delete_namespaced_pod(squatter, "team-a", grace_period_seconds=0)


def test_a_restarted_controller_takes_a_running_gang_back_from_its_pods(clean: Cluster) -> None:
    """A 4-task gang runs; the controller is killed (SIGKILL) and another starts. It takes
    the tasks back from the pods themselves (labels, placement annotation): the same pods
    keep running, the attempt stays 1, nothing is deleted or started again."""
    assert clean.apply("bob", "team-a", training_job("gang", replicas=4, gpus=4)).returncode == 0
    clean.wait("team-a", "gang", "Running")
    wait_for("4 pods running", lambda: len(clean.running_pods("team-a", "gang")) == 4)
    before = {p.metadata.name: p.metadata.uid for p in clean.pods("team-a", "gang")}
    clean.restart_controller()
    assert clean.apply("bob", "team-a", training_job("after", gpus=4)).returncode == 0
    clean.wait("team-a", "after", "Running", timeout=90)  # the new controller is acting
    after = {p.metadata.name: p.metadata.uid for p in clean.pods("team-a", "gang")}
    assert after == before
    assert all(p.metadata.deletion_timestamp is None for p in clean.pods("team-a", "gang"))
    status = clean.status("team-a", "gang")
    assert (status["state"], status["attempts"], status["controller"]["tasks"]) == (
        "Running",
        1,
        4,
    ), status
