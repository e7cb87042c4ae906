"""`priority-kill` (BASELINES.md): kube-scheduler's per-pod priority preemption, one case per
rule (PK1–PK7 in the module's docstring).

Each case is one cycle; `want` is every eviction it decides as {victim: (reason, preemptor,
tasks evicted)}, `want_starts` the jobs it starts. Victims never checkpoint on SIGTERM here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from baseline_support import NOW, cut_view, decide, evicted_tasks, releasing_view, victims

from builders import ClusterBuilder, JobBuilder, QueueBuilder, cluster, job, queue
from caldera.core import JobView

Want = dict[str, tuple[str, str | None, int]]


@dataclass(frozen=True)
class Case:
    name: str
    nodes: ClusterBuilder
    jobs: list[JobBuilder | JobView]
    want: Want
    want_starts: set[str] = field(default_factory=set)
    queues: list[QueueBuilder] = field(default_factory=list)


def nodes(count: int, gpus: int = 8, per_tier1: int = 0) -> ClusterBuilder:
    return cluster().group("n", count=count, gpus=gpus, per_tier1=per_tier1)


def running(name: str, gpus: float = 8, since: float = 0.0) -> JobBuilder:
    return job(name).gpus(gpus).running(since=since).no_emergency_checkpoint(3600)


def large(name: str = "L", gpus: float = 8) -> JobBuilder:
    return job(name).large().gpus(gpus).submitted(NOW)


def pk(*victims_: str, by: str = "L", tasks: int = 1) -> Want:
    return {v: ("preempt", by, tasks) for v in victims_}


CASES = [
    Case(
        "one node, lowest-priority victims: the debug pods' node, not the normal pod's",
        nodes(2),
        [
            running("norm").on("n-0"),
            running("dbg-a", gpus=4).debug().on("n-1"),
            running("dbg-b", gpus=4).debug().on("n-1"),
            large(),
        ],
        pk("dbg-a", "dbg-b"),
    ),
    Case(
        "reprieve: only the pods the preemptor needs go, the more important one stays",
        nodes(1),
        [
            running("norm", gpus=4).on("n-0"),
            running("dbg", gpus=4).debug().on("n-0"),
            large(gpus=4),
        ],
        pk("dbg"),
    ),
    Case(
        "victims are pods: one pod of a normal gang is cut, its other pod stays",
        nodes(2),
        [
            running("gang").gang(2, gpus=8).running(since=0).on("n-0").on("n-1"),
            large(),
        ],
        pk("gang"),
    ),
    Case(
        "queues do not matter to kube-scheduler: a pod of another queue is a victim",
        nodes(1),
        [running("theirs").queue("lab").on("n-0"), large().queue("team")],
        pk("theirs"),
        queues=[queue("lab").reclaimable(False), queue("team")],
    ),
    Case(
        "equal priority never preempts",
        nodes(1),
        [running("norm").on("n-0"), job("P").gpus(8).submitted(NOW)],
        {},
    ),
    Case(
        "debug pods (policy Never) never preempt",
        nodes(1),
        [running("dbg", gpus=8).debug().on("n-0"), job("P").debug().gpus(8).submitted(NOW)],
        {},
    ),
    Case(
        "never a victim: critical, kube-system, system class or labelled protected",
        nodes(4),
        [
            running("api").critical().on("n-0"),
            running("dns").namespace("kube-system").on("n-1"),
            running("sys").priority_class("system-node-critical").on("n-2"),
            running("keep").protected().on("n-3"),
            large(),
        ],
        {},
    ),
    Case(
        "pod group: a gang that cannot get room for all its pods evicts nothing",
        nodes(2),
        [
            running("norm").on("n-0"),
            running("api").critical().on("n-1"),
            job("L").large().gang(2, gpus=8).submitted(NOW),
        ],
        {},
    ),
    Case(
        "pod group: a gang whose pods all get room evicts one node per pod",
        nodes(2),
        [
            running("a").on("n-0"),
            running("b").on("n-1"),
            job("L").large().gang(2, gpus=8).submitted(NOW),
        ],
        pk("a", "b"),
    ),
    Case(
        "room being released is counted first: no eviction for a pod that will fit there",
        nodes(2),
        [
            releasing_view(job("gone").gpus(8).running(since=0).on("n-0", range(8)), nodes(2)),
            running("norm").on("n-1", range(8)),
            large(),
        ],
        {},
    ),
    Case(
        "a gang whose room is coming holds it: the lower-priority job may not take n-0",
        # L needs both nodes: n-0 is free now, n-1 is being released. Without holding, N
        # would start on n-0 and L would have to evict it once n-1 is free.
        nodes(2),
        [
            releasing_view(job("gone").gpus(8).running(since=0).on("n-1", range(8)), nodes(2)),
            job("L").large().gang(2, gpus=8).submitted(NOW),
            job("N").gpus(8).submitted(NOW),
        ],
        {},
    ),
    Case(
        "a pod that fits in idle room starts, no eviction",
        nodes(2),
        [running("norm").on("n-1"), large()],
        {},
        want_starts={"L"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_priority_kill_cycle(case: Case) -> None:
    _, decisions = decide("priority-kill", case.nodes, case.jobs, case.queues)
    assert victims(decisions) == case.want
    assert {s.job for s in decisions.starts} == case.want_starts


def test_cut_gang_positions_follow_earlier_cuts() -> None:
    """Two preemptors cut the same 3-pod gang in one cycle: the second eviction names the
    pod's position in what is left after the first (the runtime applies them in order)."""
    cluster_ = nodes(3)
    gang = running("gang").gang(3, gpus=8).running(since=0).on("n-0").on("n-1").on("n-2")
    _, decisions = decide(
        "priority-kill",
        cluster_,
        [gang, large("L1").submitted(NOW), large("L2").submitted(NOW + 1)],
    )
    assert [e.preemptor for e in decisions.evictions] == ["L1", "L2"]
    first, second = evicted_tasks(decisions, "gang")
    assert first == (0,)  # n-0: the first node in the tie
    assert second == (0,)  # n-1's pod, now first of the two left


def test_hung_gang_missing_pod_is_placed_again() -> None:
    """A gang cut below its minimum keeps its running pod; its missing pod starts as soon
    as there is room (PK2), as a grow of the running job."""
    cluster_ = nodes(2)
    hung = cut_view(
        job("gang").gang(2, gpus=8).running(since=0).on("n-0", range(8)).on("n-1", range(8)),
        cluster_,
        running=1,
    )
    _, decisions = decide("priority-kill", cluster_, [hung])
    assert [(s.job, s.grow, len(s.placement)) for s in decisions.starts] == [("gang", True, 1)]


def test_hung_gang_missing_pod_may_preempt() -> None:
    """Its missing pod is a pending pod of the gang's priority: it evicts a debug pod."""
    cluster_ = nodes(2)
    hung = cut_view(
        job("gang").gang(2, gpus=8).running(since=0).on("n-0", range(8)).on("n-1", range(8)),
        cluster_,
        running=1,
    )
    dbg = job("dbg").debug().gpus(8).running(since=0).on("n-1", range(8))
    _, decisions = decide("priority-kill", cluster_, [hung, dbg])
    assert victims(decisions) == {"dbg": ("preempt", "gang", 1)}


def test_a_second_later_when_a_new_victim_started() -> None:
    """The loop runs every second. Here the gang L cannot get room for both pods (N2, started
    on n-1 in this very cycle, is no victim yet), so it evicts nothing; one second later N2
    is a victim like any other: the cycle asks to run again then."""
    jobs = [
        running("norm").on("n-0"),
        job("L").large().gang(2, gpus=8).submitted(NOW),
        job("N2").gpus(8).submitted(NOW),
    ]
    _, decisions = decide("priority-kill", nodes(2), jobs)
    assert [s.job for s in decisions.starts] == ["N2"]
    assert decisions.evictions == ()
    assert decisions.wakeup == NOW + 1


def test_no_wakeup_once_every_job_has_room_coming() -> None:
    _, decisions = decide("priority-kill", nodes(1), [running("norm").on("n-0"), large()])
    assert decisions.evictions
    assert decisions.wakeup is None


@pytest.mark.parametrize("policy", ["priority-kill", "volcano"])
def test_a_job_grown_this_cycle_is_no_victim_in_it(policy: str) -> None:
    """E (large, 2 × 8, min 1) runs one pod and gets its missing pod on n-2 in this cycle;
    the critical 2 × 8 gang C cannot use E's first pod as a victim in the same cycle (the
    runtime would apply the eviction before the grow and leave a requeued job holding room),
    so with only N on n-0 to evict, C's pod group is turned away and nothing is evicted."""
    jobs = [
        running("N").on("n-0"),
        job("E").large().gang(2, gpus=8, min_available=1).running(since=0).on("n-1"),
        job("C").critical().gang(2, gpus=8).submitted(NOW),
    ]
    _, decisions = decide(policy, nodes(3), jobs)
    assert victims(decisions) == {}
    assert [(s.job, s.grow) for s in decisions.starts] == [("E", True)]
