"""Why pending jobs did not start (caldera.core.waiting): one small case per reason, and a
property — after any cycle, every pending job that neither started nor was held has one."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from test_cycle_properties import World, worlds

from builders import JobBuilder, QueueBuilder, cluster, job, queue, snapshot
from caldera.core import CALDERA, Snapshot, WaitingReasons, WaitReason, run
from caldera.model import JobState

NOW = 10_000.0


@dataclass
class Case:
    name: str
    nodes: object
    jobs: list[JobBuilder]
    want: dict[str, tuple[WaitReason, str] | None]  # job -> (reason, a piece of its detail)
    queues: tuple[QueueBuilder, ...] = ()


def full(node: str, *, kind: str = "critical", gpus: int = 8) -> JobBuilder:
    """A running job filling `gpus` devices of `node`."""
    return job(f"fill-{node}").type(kind).gpus(gpus).running(since=NOW - 60).on(node)


ONE_NODE = cluster().group("n", count=1)
TWO_RACKS = cluster().group("n", count=2, per_tier1=1)

CASES = [
    Case(
        "closed queue",
        ONE_NODE,
        [job("a").queue("shut")],
        {"a": (WaitReason.CLOSED, "queue shut is Closed")},
        (queue("shut").closed(),),
    ),
    Case(
        "gang larger than its queue's cap",
        ONE_NODE,
        [job("a").gpus(8).queue("capped")],
        {"a": (WaitReason.CAPABILITY, "capped at 4")},
        (queue("capped").capability(gpu=4),),
    ),
    Case(
        "queue at its cap",
        cluster().group("n", count=2),
        [
            job("run").gpus(4).running(since=NOW - 60).on("n-0").queue("capped"),
            job("a").gpus(1).queue("capped"),
        ],
        {"a": (WaitReason.CAPABILITY, "holds 4 of its cap of 4 GPUs")},
        (queue("capped").capability(gpu=4),),
    ),
    Case(
        "no room for a debug job, which never preempts",
        ONE_NODE,
        [full("n-0", kind="normal"), job("a").debug()],
        {"a": (WaitReason.NO_ROOM, "needs 1 GPUs; 0 free; debug jobs never preempt")},
    ),
    Case(
        "no room and nothing may give way",
        ONE_NODE,
        [full("n-0"), job("a")],
        {"a": (WaitReason.NO_VICTIMS, "no running job may give way")},
    ),
    Case(
        "victims signalled, room reserved",
        ONE_NODE,
        [full("n-0", kind="normal"), job("big").large().gpus(8)],
        {"big": (WaitReason.VICTIMS, "waiting for 1 preempted job(s) to release it (fill-n-0)")},
    ),
    Case(
        "enough GPUs free, but not inside one tier-1 domain",
        TWO_RACKS,
        [
            full("n-0", gpus=4),
            full("n-1", gpus=4),
            job("a").debug().gang(2, gpus=4).topology(tier=1, mode="hard"),
        ],
        {"a": (WaitReason.TOPOLOGY, "needs 8 GPUs inside one tier-1 domain; the freest has 4")},
    ),
    Case(
        "enough GPUs free, but not on one node",
        cluster().group("n", count=2),
        [full("n-0", gpus=4), full("n-1", gpus=4), job("a").debug().gpus(8)],
        {"a": (WaitReason.FRAGMENTED, "8 GPUs free, but not 8 together")},
    ),
    Case(
        "one group: the first starts, the rest share the reason",
        ONE_NODE,
        [
            full("n-0", gpus=7),
            job("a").debug().submitted(1),
            job("b").debug().submitted(2),
            job("c").debug().submitted(3),
        ],
        {"a": None, "b": (WaitReason.NO_ROOM, "0 free"), "c": (WaitReason.NO_ROOM, "0 free")},
    ),
    Case(
        "held jobs are explained by their hold",
        ONE_NODE,
        [full("n-0"), job("a").held("throttle")],
        {"a": None},
    ),
]


def reasons(snap: Snapshot) -> dict[str, tuple[WaitReason, str] | None]:
    decisions = run(snap, CALDERA)
    started = {s.job for s in decisions.starts}
    found = WaitingReasons.of(decisions.waiting)
    result: dict[str, tuple[WaitReason, str] | None] = {}
    for view in snap.jobs:
        if view.state in (JobState.PENDING, JobState.HELD):
            entry = None if view.id in started else found.reason(view.spec)
            result[view.spec.name] = None if entry is None else (entry.reason, entry.detail)
    return result


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reason(case: Case) -> None:
    got = reasons(snapshot(case.nodes, queues=case.queues, jobs=case.jobs, now=NOW))  # type: ignore[arg-type]
    for name, want in case.want.items():
        if want is None:
            assert got[name] is None, f"{name}: {got[name]}"
            continue
        assert got[name] is not None, f"{name} has no reason"
        reason, detail = got[name]  # type: ignore[misc]
        assert reason is want[0], f"{name}: {reason} ({detail})"
        assert want[1] in detail, f"{name}: {detail!r}"


@given(worlds())
def test_every_pending_job_left_waiting_is_explained(world: World) -> None:
    snap = world.snapshot()
    decisions = run(snap, CALDERA)
    moved = {s.job for s in decisions.starts} | {h.job for h in decisions.holds}
    found = WaitingReasons.of(decisions.waiting)
    for view in snap.in_state(JobState.PENDING):
        if view.id not in moved:
            assert found.reason(view.spec) is not None, view.spec
