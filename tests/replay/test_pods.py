"""The jobs' part a replay plays on a cluster that runs nothing (caldera.replay.pods), driven
by pod events as the watch delivers them, with the API clients replaced by recorders.

What the replay's figures rest on: a gang starts once `min_available` pods are bound and every
running pod is told when the job ends; an eviction below `min_available` loses the work since
the last save and hangs what is left; deletions of one job within a second are one eviction;
a job that checkpoints on SIGTERM loses nothing and reports its checkpoint to the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import job
from caldera.core import PolicyConfig
from caldera.model import JobSpec
from caldera.replay.api import rfc3339
from caldera.replay.manifests import REPLAY_JOB
from caldera.replay.measure import Occurrence, Timeline
from caldera.replay.pods import EVICTION_WINDOW, PodFollower, submit_annotations
from caldera.trainingjob_api import CHECKPOINT

WALL0 = 1_700_000_000.0
SUCCEED_AT = "caldera.io/kwok-succeed-at"


@dataclass
class Recorder:
    """The CoreV1Api and CustomObjectsApi calls the follower makes."""

    patches: dict[str, dict[str, str]] = field(default_factory=dict)  # pod -> annotations
    deleted: list[str] = field(default_factory=list)

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patches.setdefault(name, {}).update(body["metadata"]["annotations"])

    def delete_namespaced_custom_object(self, *args: str) -> None:
        self.deleted.append(args[-1])


def follower(
    spec: JobSpec, controller: bool = False, config: PolicyConfig | None = None
) -> tuple[PodFollower, Recorder]:
    api = Recorder()
    timeline = Timeline({spec.id: spec}, 64_000, {})
    pods = PodFollower(
        [spec],
        {spec.id: spec.id},
        timeline,
        config or PolicyConfig(),
        controller,
        api,
        api,
        lambda t: WALL0 + t,
        [],
    )
    return pods, api


def pod(
    job_name: str, rank: int, node: str | None = None, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "uid": f"{job_name}-uid-{rank}",
        "name": f"{job_name}-{rank}",
        "labels": {REPLAY_JOB: job_name},
    }
    if deleting:
        meta["deletionTimestamp"] = "2023-11-14T22:13:20Z"
        meta["deletionGracePeriodSeconds"] = 30
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {}}


def bind_all(pods: PodFollower, name: str, count: int, t: float) -> None:
    for rank in range(count):
        pods.handle("MODIFIED", t, pod(name, rank, node=f"n{rank}"))


def kinds(pods: PodFollower) -> list[tuple[str, float, int]]:
    return [(o.kind, o.t, o.tasks) for o in pods.timeline.occurrences]


def test_a_gang_starts_whole_and_every_pod_is_told_when_it_ends() -> None:
    spec = job("g").gang(4, gpus=8, min_available=3).duration(1000).build()
    pods, api = follower(spec)
    bind_all(pods, "g", 2, t=10.0)
    assert pods.start_order == [] and api.patches == {}  # below min_available: no progress
    pods.handle("MODIFIED", 12.0, pod("g", 2, node="n2"))
    assert pods.start_order == ["g"]
    end = rfc3339(WALL0 + 12.0 + 1000)
    assert api.patches == {f"g-{r}": {SUCCEED_AT: end} for r in range(3)}
    pods.handle("MODIFIED", 20.0, pod("g", 3, node="n3"))  # a late pod joins the same end
    assert api.patches["g-3"] == {SUCCEED_AT: end}
    assert kinds(pods) == [
        ("bind", 10.0, 1),
        ("bind", 10.0, 1),
        ("bind", 12.0, 1),
        ("bind", 20.0, 1),
    ]


def test_an_eviction_below_min_available_loses_unsaved_work_and_hangs_the_rest() -> None:
    spec = job("g").gang(3, gpus=8).no_emergency_checkpoint(interval=100).duration(1000).build()
    pods, api = follower(spec)
    bind_all(pods, "g", 3, t=0.0)
    pods.handle("MODIFIED", 250.0, pod("g", 0, node="n0", deleting=True))
    pods.handle("MODIFIED", 250.5, pod("g", 1, node="n1", deleting=True))
    assert pods.victims == ["g"]
    assert api.patches["g-2"] == {SUCCEED_AT: "2100-01-01T00:00:00Z"}  # gang hang
    pods.flush_all(now=250.0 + EVICTION_WINDOW / 2)
    assert not [o for o in pods.timeline.occurrences if o.kind == "evict"]  # window still open
    pods.flush_all(now=250.0 + EVICTION_WINDOW)
    (evict,) = [o for o in pods.timeline.occurrences if o.kind == "evict"]
    # 250 s of work, saved at 200: 50 s lost on the 3 × 8 GPUs held when the gang broke
    assert evict == Occurrence(250.0, "evict", "g", tasks=2, lost=50.0 * 24)
    for rank in (0, 1):
        pods.handle("DELETED", 260.0, pod("g", rank, node=f"n{rank}", deleting=True))
    assert [k for k in kinds(pods) if k[0] == "release"] == [("release", 260.0, 1)] * 2
    # whole again: resumes from the save at 200, so it ends 800 s after it runs again
    pods.handle("MODIFIED", 300.0, pod("g", 5, node="n5"))  # the replacements bind
    pods.handle("MODIFIED", 300.0, pod("g", 6, node="n6"))
    assert api.patches["g-5"] == {SUCCEED_AT: rfc3339(WALL0 + 300.0 + 800)}


@pytest.mark.parametrize("controller", [True, False], ids=["controller", "volcano"])
def test_an_emergency_checkpoint_loses_nothing_and_reports_to_the_controller(
    controller: bool,
) -> None:
    spec = job("c").gang(2, gpus=8).checkpoint(interval=600, cost=30).duration(1000).build()
    assert submit_annotations(spec, PolicyConfig()) == {"caldera.io/kwok-exit-after-term": "30.000"}
    pods, api = follower(spec, controller=controller)
    bind_all(pods, "c", 2, t=0.0)
    pods.handle("MODIFIED", 500.0, pod("c", 0, node="n0", deleting=True))
    pods.flush_all(force=True)
    (evict,) = [o for o in pods.timeline.occurrences if o.kind == "evict"]
    assert evict.lost == 0.0
    reported = CHECKPOINT in api.patches.get("c-0", {})
    assert reported is controller


def test_no_exit_after_term_without_an_emergency_checkpoint_that_fits() -> None:
    config = PolicyConfig(grace_period=20.0)
    too_slow = job("s").checkpoint(interval=600, cost=30).build()
    no_handler = job("n").no_emergency_checkpoint(interval=600).build()
    assert submit_annotations(too_slow, config) == {}
    assert submit_annotations(no_handler, PolicyConfig()) == {}


def test_a_finished_volcano_job_is_deleted_and_counted_once() -> None:
    spec = job("v").gang(2, gpus=1).duration(100).build()
    pods, api = follower(spec, controller=False)
    bind_all(pods, "v", 2, t=0.0)
    for rank in range(2):
        done = pod("v", rank, node=f"n{rank}")
        done["status"] = {"phase": "Succeeded"}
        pods.handle("MODIFIED", 100.0, done)
    assert [k for k in kinds(pods) if k[0] == "finish"] == [("finish", 100.0, 0)]
    assert api.deleted == ["v"] and pods.all_finished()


def test_a_relist_ends_the_pods_it_no_longer_shows() -> None:
    spec = job("r").gang(2, gpus=1).duration(100).build()
    pods, _ = follower(spec)
    bind_all(pods, "r", 2, t=0.0)
    pods.handle("LIST", 50.0, [pod("r", 1, node="n1")])  # r-0 vanished between two looks
    assert pods.victims == ["r"]
    assert [k for k in kinds(pods) if k[0] == "release"] == [("release", 50.0, 1)]
