"""`volcano` (BASELINES.md points V1–V9): one cycle per case, one rule per case.

`want` is every eviction the cycle decides as {victim: (reason, preemptor, tasks evicted)};
`want_starts` the jobs it starts. Victims never checkpoint on SIGTERM here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from baseline_support import NOW, decide, evicted_tasks, releasing_view, victims

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


def by(reason: str, preemptor: str, **victims_: int) -> Want:
    return {v: (reason, preemptor, tasks) for v, tasks in victims_.items()}


CASES = [
    Case(
        "V6 victim order: lower priority first, then newest; greedy, not the smallest set",
        # debug 2 GPUs goes first (lowest priority) but is not enough; the normal 6-GPU pod
        # alone would have done.
        nodes(1),
        [
            running("norm", gpus=6).on("n-0"),
            running("dbg", gpus=2).debug().on("n-0"),
            large(gpus=6),
        ],
        by("preempt", "L", dbg=1, norm=1),
    ),
    Case(
        "V6 newest task first among equals",
        nodes(1),
        [
            running("old", gpus=4, since=0).on("n-0"),
            running("new", gpus=4, since=100).on("n-0"),
            large(gpus=4),
        ],
        by("preempt", "L", new=1),
    ),
    Case(
        "V6 gang minimum not protected: one task of a normal gang is evicted",
        nodes(1),
        [running("gang").gang(2, gpus=4).running(since=0).on("n-0").on("n-0"), large(gpus=4)],
        by("preempt", "L", gang=1),
    ),
    Case(
        "V6 strictly lower priority: an equal-priority job is no victim",
        nodes(1),
        [running("other").large().on("n-0"), large()],
        {},
    ),
    Case(
        "V6 preempt stays inside the queue: other queues' jobs are not its victims",
        nodes(1),
        [running("theirs").queue("lab").on("n-0"), large().queue("team")],
        {},
        queues=[queue("lab").reclaimable(False), queue("team")],
    ),
    Case(
        "V6 never kube-system, system-critical, critical or protected",
        nodes(4),
        [
            running("dns").namespace("kube-system").on("n-0"),
            running("sys").priority_class("system-cluster-critical").on("n-1"),
            running("api").critical().on("n-2"),
            running("keep").protected().on("n-3"),
            job("P").critical().gpus(8).submitted(NOW),
        ],
        {},
    ),
    Case(
        "V6 commit only if the whole job becomes placeable, else roll back",
        # Task 1 could evict "norm" on n-0, task 2 finds no victim on n-1 (same priority):
        # nothing is evicted.
        nodes(2),
        [
            running("norm").on("n-0"),
            running("peer").large().on("n-1"),
            job("L").large().gang(2, gpus=8).submitted(NOW),
        ],
        {},
    ),
    Case(
        "V6 one node per task: a gang evicts on as many nodes as it has tasks",
        nodes(2),
        [
            running("a").on("n-0"),
            running("b").on("n-1"),
            job("L").large().gang(2, gpus=8).submitted(NOW),
        ],
        by("preempt", "L", a=1, b=1),
    ),
    Case(
        "V4/V5 pipelined on room being released: not starving, nothing evicted",
        nodes(2),
        [
            releasing_view(job("gone").gpus(8).running(since=0).on("n-0", range(8)), nodes(2)),
            running("dbg").debug().on("n-1", range(8)),
            large(),
        ],
        {},
    ),
    Case(
        "V4 a job that fits in idle room binds, no eviction",
        nodes(2),
        [running("norm").on("n-0"), large()],
        {},
        want_starts={"L"},
    ),
    Case(
        "V6 + proportion: a queue over its deserved keeps evicting until it is within it",
        # team deserves 8 of 16 GPUs (lab asks for 8) but holds 12: after the two debug pods
        # on n-0 make room the queue is still over, so the normal job on n-1 goes too.
        nodes(2),
        [
            running("dbg-1", gpus=2).debug().queue("team").on("n-0"),
            running("dbg-2", gpus=2).debug().queue("team").on("n-0"),
            running("lab-1", gpus=4).queue("lab").on("n-0"),
            running("norm").queue("team").on("n-1"),
            job("lab-2").gpus(4).queue("lab").submitted(NOW),
            large(gpus=4).queue("team"),
        ],
        by("preempt", "L", **{"dbg-1": 1, "dbg-2": 1, "norm": 1}),
        queues=[queue("team"), queue("lab")],
    ),
    Case(
        "V7 reclaim takes only tasks above the victim's min_available",
        nodes(2),
        [
            job("elastic")
            .queue("lab")
            .gang(4, gpus=4, min_available=2)
            .running(since=0)
            .no_emergency_checkpoint(3600)
            .on_each("n-0", "n-0", "n-1", "n-1"),
            job("P").gpus(8).queue("team").submitted(NOW),
        ],
        by("reclaim", "P", elastic=2),
        queues=[queue("team"), queue("lab")],
    ),
    Case(
        "V7 reclaim never cuts a gang below its minimum",
        nodes(2),
        [
            job("gang")
            .queue("lab")
            .gang(4, gpus=4)
            .running(since=0)
            .on_each("n-0", "n-0", "n-1", "n-1"),
            job("P").gpus(8).queue("team").submitted(NOW),
        ],
        {},
        queues=[queue("team"), queue("lab")],
    ),
    Case(
        "V7 reclaim leaves queues marked reclaimable: false alone",
        nodes(2),
        [
            job("elastic")
            .queue("lab")
            .gang(4, gpus=4, min_available=2)
            .running(since=0)
            .on_each("n-0", "n-0", "n-1", "n-1"),
            job("P").gpus(8).queue("team").submitted(NOW),
        ],
        {},
        queues=[queue("team"), queue("lab").reclaimable(False)],
    ),
    Case(
        "V5 debug jobs (Never) neither preempt nor reclaim",
        nodes(1),
        [running("dbg").debug().on("n-0"), job("P").debug().gpus(8).submitted(NOW)],
        {},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_volcano_cycle(case: Case) -> None:
    _, decisions = decide("volcano", case.nodes, case.jobs, case.queues)
    assert victims(decisions) == case.want
    assert {s.job for s in decisions.starts} == case.want_starts


def test_same_snapshot_kube_scheduler_evicts_less() -> None:
    """The first V6 case under priority-kill: kube-scheduler's reprieve keeps the debug pod
    and evicts only the normal one — Volcano's greedy order evicts both."""
    jobs = [
        running("norm", gpus=6).on("n-0"),
        running("dbg", gpus=2).debug().on("n-0"),
        large(gpus=6),
    ]
    _, decisions = decide("priority-kill", nodes(1), jobs)
    assert victims(decisions) == by("preempt", "L", norm=1)


def test_victim_gang_loses_its_newest_task() -> None:
    _, decisions = decide(
        "volcano",
        nodes(1),
        [running("gang").gang(2, gpus=4).running(since=0).on("n-0").on("n-0"), large(gpus=4)],
    )
    assert evicted_tasks(decisions, "gang") == [(1,)]


def test_a_second_later_when_a_new_victim_started() -> None:
    """The loop runs every second. Here the gang L cannot get room for both pods (N2, started
    on n-1 in this very cycle, is no victim yet), so it evicts nothing; one second later N2
    is a victim like any other: the cycle asks to run again then."""
    jobs = [
        running("norm").on("n-0"),
        job("L").large().gang(2, gpus=8).submitted(NOW),
        job("N2").gpus(8).submitted(NOW),
    ]
    _, decisions = decide("volcano", nodes(2), jobs)
    assert [s.job for s in decisions.starts] == ["N2"]
    assert decisions.evictions == ()
    assert decisions.wakeup == NOW + 1


def test_no_wakeup_once_every_job_has_room_coming() -> None:
    _, decisions = decide("volcano", nodes(1), [running("norm").on("n-0"), large()])
    assert decisions.evictions
    assert decisions.wakeup is None


def test_a_cycle_that_decides_nothing_asks_for_nothing() -> None:
    """Between events the same snapshot gives the same answer: no wake-up needed."""
    _, decisions = decide(
        "volcano", nodes(1), [running("norm").on("n-0"), job("P").gpus(8).submitted(NOW)]
    )
    assert decisions.empty
    assert decisions.wakeup is None


def test_decisions_are_deterministic() -> None:
    jobs = [
        running("a", gpus=4).on("n-0"),
        running("b", gpus=4).debug().on("n-0"),
        running("c").on("n-1"),
        job("L").large().gang(2, gpus=8).submitted(NOW),
    ]
    first = decide("volcano", nodes(2), jobs)[1]
    again = decide("volcano", nodes(2), jobs)[1]
    assert first == again
    assert first.evictions


def test_the_package_keeps_the_module_names_and_phase_order() -> None:
    """`caldera.baselines.volcano` is a package of one module per action; what the single
    module exported is still importable from its root, and both policies run the actions in
    Volcano's order (seed 001's wrapped, same names with a suffix)."""
    import caldera.baselines.volcano as volcano

    assert sorted(volcano.__all__) == [
        "VOLCANO",
        "VOLCANO_SEED_001",
        "nodeorder_place",
        "nodeorder_score",
        "victim_order",
        "volcano_allocate",
        "volcano_close",
        "volcano_job_order",
        "volcano_preempt",
        "volcano_reclaim",
    ]
    assert all(hasattr(volcano, name) for name in volcano.__all__)
    actions = ["volcano_allocate", "volcano_preempt", "volcano_reclaim", "volcano_close"]
    assert [p.__name__ for p in volcano.VOLCANO.phases] == ["enqueue", *actions]
    assert [p.__name__ for p in volcano.VOLCANO_SEED_001.phases] == [
        "enqueue",
        *(f"{name}_seed001" for name in actions),
    ]
