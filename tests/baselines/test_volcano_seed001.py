"""`volcano-seed001`: Volcano as seed 001 configures it (one tier), against `volcano` (its CI
configuration) on the same snapshot. Points S1-S3 of caldera.baselines.volcano, each citing
Volcano v1.15.1's source: in one tier every plugin judges the same victims and only the tasks
all of them allow go (framework/session_plugins.go, Preemptable/Reclaimable).

`want` is every eviction of one cycle as {victim: (reason, preemptor, tasks)}, per policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from baseline_support import NOW, decide, victims

from builders import ClusterBuilder, JobBuilder, QueueBuilder, cluster, job, queue

Want = dict[str, tuple[str, str | None, int]]


@dataclass(frozen=True)
class Case:
    name: str
    nodes: ClusterBuilder
    jobs: list[JobBuilder]
    ci: Want  # `volcano`
    seed001: Want  # `volcano-seed001`
    queues: list[QueueBuilder] = field(default_factory=list)


def nodes(count: int, gpus: int = 8) -> ClusterBuilder:
    return cluster().group("n", count=count, gpus=gpus)


def running(name: str) -> JobBuilder:
    return job(name).running(since=0).no_emergency_checkpoint(3600)


def elastic(name: str, queue_name: str = "default") -> JobBuilder:
    """Four 2-GPU tasks on n-0, one of them its minimum: three are above it."""
    return (
        running(name)
        .queue(queue_name)
        .gang(4, gpus=2, min_available=1)
        .running(since=0)
        .on_each("n-0", "n-0", "n-0", "n-0")
    )


def by(reason: str, preemptor: str, **tasks: int) -> Want:
    return {victim: (reason, preemptor, count) for victim, count in tasks.items()}


THREE_QUEUES = [queue("team"), queue("lab"), queue("ops").reclaimable(False)]

CASES = [
    Case(
        "S1 gang judges preempt: a gang at its minimum keeps its tasks",
        nodes(1),
        [
            running("gang").gang(2, gpus=4).running(since=0).on("n-0").on("n-0"),
            job("L").large().gpus(4).submitted(NOW),
        ],
        ci=by("preempt", "L", gang=1),
        seed001={},
    ),
    Case(
        "S1 gang judges preempt: a single-pod job is at its minimum, never a victim",
        nodes(1),
        [running("solo").gpus(8).on("n-0"), job("L").large().gpus(8).submitted(NOW)],
        ci=by("preempt", "L", solo=1),
        seed001={},
    ),
    Case(
        "S2 drf: a victim's job must keep a dominant share no smaller than the preemptor's",
        # L (6 of 8 GPUs: 0.75) may take one 2-GPU task (el keeps 6: 0.75), not a second
        # (el would keep 4: 0.5); it needs three, so nothing is evicted. gang would allow 3.
        nodes(1),
        [elastic("el"), job("L").large().gpus(6).submitted(NOW)],
        ci=by("preempt", "L", el=3),
        seed001={},
    ),
    Case(
        "S2 drf allows a small preemptor against a large job",
        nodes(1),
        [elastic("el"), job("L").large().gpus(2).submitted(NOW)],
        ci=by("preempt", "L", el=1),
        seed001=by("preempt", "L", el=1),
    ),
    Case(
        "S3 proportion judges reclaim: only while the victim's queue is over its deserved",
        # team deserves 4 (its request), lab and ops 6 each; lab holds 8: one 2-GPU task
        # brings it to its deserved, P needs two.
        nodes(2),
        [
            elastic("el", "lab"),
            running("svc").queue("ops").gpus(8).on("n-1"),
            job("P").gpus(4).queue("team").submitted(NOW),
        ],
        ci=by("reclaim", "P", el=2),
        seed001={},
        queues=THREE_QUEUES,
    ),
    Case(
        "S3 proportion allows what takes the victim's queue down to its deserved",
        nodes(2),
        [
            elastic("el", "lab"),
            running("svc").queue("ops").gpus(8).on("n-1"),
            job("P").gpus(2).queue("team").submitted(NOW),
        ],
        ci=by("reclaim", "P", el=1),
        seed001=by("reclaim", "P", el=1),
        queues=THREE_QUEUES,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_tier_against_the_ci_configuration(case: Case) -> None:
    _, ci = decide("volcano", case.nodes, case.jobs, case.queues)
    _, seed001 = decide("volcano-seed001", case.nodes, case.jobs, case.queues)
    assert victims(ci) == case.ci
    assert victims(seed001) == case.seed001


def test_seed001_is_deterministic() -> None:
    case = CASES[3]
    first = decide("volcano-seed001", case.nodes, case.jobs, case.queues)[1]
    again = decide("volcano-seed001", case.nodes, case.jobs, case.queues)[1]
    assert first == again
