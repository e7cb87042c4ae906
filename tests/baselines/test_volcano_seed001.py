"""`volcano-seed001`: Volcano as seed 001 configures it (one tier), against `volcano` (its CI
configuration) on the same snapshot. Points S1-S4 of caldera.baselines.volcano, each citing
Volcano v1.15.1's source: in one tier every plugin judges the same victims and only the tasks
all of them allow go (framework/session_plugins.go, Preemptable/Reclaimable); S4: seed 001
scores nodes with nodeorder's defaults, which spread GPU pods, where `volcano` binpacks.

`want` is every eviction of one cycle as {victim: (reason, preemptor, tasks)}, per policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from baseline_support import NOW, decide, victims

from builders import ClusterBuilder, JobBuilder, QueueBuilder, cluster, job, queue
from caldera.baselines.volcano import nodeorder_score
from caldera.core import Decisions
from caldera.core.room import Room, TaskPlacement
from caldera.model import JobSpec, JobType, Node

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


# -- S4: nodeorder, not binpack ----------------------------------------------------------------


def _nodes_of(decisions: Decisions, job_name: str) -> list[int]:
    starts = [s for s in decisions.starts if s.job == job_name]
    return sorted(task.node for s in starts for task in s.placement)


@pytest.mark.parametrize(
    ("pending", "ci_nodes", "seed001_nodes"),
    [
        # n-0 runs 6 of 8 GPUs, n-1 2, n-2 none. binpack fills the fullest node that fits;
        # nodeorder's BalancedAllocation puts the pod where GPUs are least used after it.
        (job("p").gpus(2), [0], [2]),
        (job("p").gpus(1), [0], [2]),
        # two 4-GPU pods: binpack puts the first on n-1 (6 free, the fullest that fits), the
        # second on n-2; nodeorder puts the first on n-2 (none used), the second on n-1
        # (2 used there against n-2's 4).
        (job("p").gang(2, gpus=4), [1, 2], [1, 2]),
        # an 8-GPU pod fits only the empty node under either
        (job("p").gpus(8), [2], [2]),
    ],
    ids=["2-gpu", "1-gpu", "two-4-gpu-pods", "8-gpu"],
)
def test_s4_nodeorder_spreads_gpu_pods(
    pending: JobBuilder, ci_nodes: list[int], seed001_nodes: list[int]
) -> None:
    jobs = [
        running("a").gpus(6).on("n-0"),
        running("b").gpus(2).on("n-1"),
        pending.submitted(NOW),
    ]
    _, ci = decide("volcano", nodes(3), jobs)
    _, seed001 = decide("volcano-seed001", nodes(3), jobs)
    assert _nodes_of(ci, "p") == ci_nodes
    assert _nodes_of(seed001, "p") == seed001_nodes


def test_s4_fragmentation_keeps_an_8_gpu_pod_waiting_where_binpack_starts_it() -> None:
    """Two 1-GPU pods, then an 8-GPU one, on two empty 8-GPU nodes, in one cycle: binpack
    puts both small pods on n-0 and the big one on n-1; nodeorder puts one small pod on each
    node and the big one fits nowhere (Volcano as seed 001 runs it fragments nodes)."""
    jobs = [
        job("s1").gpus(1).submitted(NOW - 2),
        job("s2").gpus(1).submitted(NOW - 1),
        job("big").gpus(8).submitted(NOW),
    ]
    _, ci = decide("volcano", nodes(2), jobs)
    _, seed001 = decide("volcano-seed001", nodes(2), jobs)
    assert _nodes_of(ci, "s1") + _nodes_of(ci, "s2") == [0, 0]
    assert _nodes_of(ci, "big") == [1]
    assert sorted(_nodes_of(seed001, "s1") + _nodes_of(seed001, "s2")) == [0, 1]
    assert _nodes_of(seed001, "big") == []


@pytest.mark.parametrize(
    ("gpus_used", "cpu_used", "pod_gpu", "pod_cpu", "score"),
    [
        # 8 GPUs, 128 cores, 1 TiB: LeastAllocated = (99 + 99) / 2 = 99 for a pod asking no cpu
        # or memory (100m / 200 MiB counted); BalancedAllocation over (cpu 0, mem 0, gpu f):
        # std = f·√2/3, score = int((1 − std)·100).
        (0, 0, 1000, 0, 99 + 94),  # f = 1/8
        (2000, 0, 1000, 0, 99 + 82),  # f = 3/8
        (0, 0, 8000, 0, 99 + 52),  # f = 1
        # a pod asking half the cores: LeastAllocated cpu 50, memory 99 → 74; Balanced over
        # (0.5, 0, 0.125): mean 0.2083, std 0.2125 → 78
        (0, 0, 1000, 64000, 74 + 78),
    ],
)
def test_s4_nodeorder_score_matches_the_kubernetes_formulas(
    gpus_used: int, cpu_used: int, pod_gpu: int, pod_cpu: int, score: int
) -> None:
    node = Node(0, "n-0", 8, "H100", 128000, 1048576, island_size=8, tier1=0, tier2=0)
    room = Room((node,))
    if gpus_used:
        room.take(TaskPlacement(0, tuple(range(gpus_used // 1000)), 1000, cpu_used, 0))
    spec = JobSpec("p", "p", "default", JobType.NORMAL, 0.0, gpu=pod_gpu, cpu=pod_cpu)
    assert nodeorder_score(room, 0, spec) == score
