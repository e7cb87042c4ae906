"""`fifo` (BASELINES.md): queues by share, jobs by submit time, whole gangs, never an eviction.

Table-driven: each case is one cycle; `want_starts` is every job the cycle starts (with its
task count) and nothing is ever evicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from baseline_support import NOW, decide

from builders import ClusterBuilder, JobBuilder, QueueBuilder, cluster, job, queue


@dataclass(frozen=True)
class Case:
    name: str
    nodes: ClusterBuilder
    jobs: list[JobBuilder]
    want_starts: dict[str, int]
    queues: list[QueueBuilder] = field(default_factory=list)


def nodes(count: int, gpus: int = 8, per_tier1: int = 0) -> ClusterBuilder:
    return cluster().group("n", count=count, gpus=gpus, per_tier1=per_tier1)


CASES = [
    Case(
        "jobs by submit time, not priority: the earlier normal job gets the node",
        nodes(1),
        [job("late-critical").critical().gpus(8).submitted(50), job("early").gpus(8)],
        {"early": 1},
    ),
    Case(
        "nothing blocks the line: a gang that does not fit is passed over",
        nodes(2),
        [
            job("busy").gpus(8).running(since=0).on("n-0"),
            job("gang").gang(2, gpus=8).submitted(10),
            job("small").gpus(4).submitted(20),
        ],
        {"small": 1},
    ),
    Case(
        "gangs all-or-nothing: 3 × 8 GPUs on two free nodes starts nothing",
        nodes(2),
        [job("gang").gang(3, gpus=8)],
        {},
    ),
    Case(
        "hard topology: a gang fits only inside one tier-1 domain",
        nodes(4, per_tier1=2),
        [
            job("a").gpus(8).running(since=0).on("n-0"),
            job("b").gpus(8).running(since=0).on("n-2"),
            job("gang").gang(2, gpus=8).topology(tier=1, mode="hard"),
        ],
        {},
    ),
    Case(
        "queues by share: the emptier queue goes first when there is room for one job",
        nodes(2),
        [
            job("full-1").queue("busy").gpus(8).running(since=0).on("n-0"),
            job("busy-next").queue("busy").gpus(8).submitted(0),
            job("idle-next").queue("idle").gpus(8).submitted(100),
        ],
        {"idle-next": 1},
        [queue("busy").deserved(gpu=8), queue("idle").deserved(gpu=8)],
    ),
    Case(
        "capability: a queue at its cap starts nothing more, the other queue does",
        nodes(2),
        [
            job("capped-1").queue("capped").gpus(8).running(since=0).on("n-0"),
            job("capped-2").queue("capped").gpus(8).submitted(0),
            job("other").queue("other").gpus(4).submitted(10),
        ],
        {"other": 1},
        [queue("capped").capability(gpu=8), queue("other")],
    ),
    Case(
        "elastic: start with what fits above min_available, no more",
        nodes(1),
        [job("elastic").gang(4, gpus=4, min_available=1)],
        {"elastic": 2},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fifo_cycle(case: Case) -> None:
    _, decisions = decide("fifo", case.nodes, case.jobs, case.queues)
    assert decisions.evictions == ()
    assert {s.job: len(s.placement) for s in decisions.starts} == case.want_starts


def test_fifo_never_evicts_for_anyone() -> None:
    """A full cluster of normal and debug work; critical and large jobs wait their turn."""
    running = [job(f"r{i}").gpus(8).running(since=0).on(f"n-{i}") for i in range(3)]
    running.append(job("dbg").debug().gpus(8).running(since=0).on("n-3"))
    waiting = [
        job("api").critical().gpus(8).submitted(NOW),
        job("train").large().gang(2, gpus=8).submitted(NOW),
    ]
    _, decisions = decide("fifo", nodes(4), [*running, *waiting])
    assert decisions.evictions == ()
    assert decisions.starts == ()
    assert decisions.wakeup is None  # nothing to come back for: it never preempts
