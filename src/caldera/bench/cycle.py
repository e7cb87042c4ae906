"""`caldera bench cycle`: time full scheduling cycles on a large synthetic snapshot.

The snapshot is seeded and realistic rather than kind: a topology of 8-node tier-1 domains,
four team queues, running jobs packed the way a busy cluster looks (single GPUs to 4×8 gangs,
so free room is fragmented) and a deep pending backlog of every type and shape, including
hard-topology gangs and GPU shares. Every cycle runs on the same snapshot, which the cycle
leaves unchanged, so each timing is a full cold decision. Runtimes keep the free-room index
and the job index up to date between cycles and hand them in; `snapshot_build_ms` reports
what building both from scratch would add, for a runtime that does not.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from caldera.compiled import status
from caldera.core import CALDERA, JobView, PolicyConfig, Room, Snapshot, run
from caldera.core.placement import fit_on_node, place_job
from caldera.metrics_util import percentile
from caldera.model import (
    Checkpointing,
    JobSpec,
    JobState,
    JobType,
    NodeGroup,
    Queue,
    Resources,
    TopologyMode,
    TopologySpec,
    expand_node_groups,
)

__all__ = ["CASES", "CycleBenchResult", "bench_cycle", "build_saturated_snapshot", "build_snapshot"]

_QUEUES = ("research", "prod", "vision", "speech")
# (weight, type, tasks, gpus per task in milli, topology tier or 0)
_SHAPES: tuple[tuple[int, JobType, int, int, int], ...] = (
    (30, JobType.NORMAL, 1, 1000, 0),
    (15, JobType.NORMAL, 1, 2000, 0),
    (10, JobType.NORMAL, 1, 4000, 0),
    (12, JobType.NORMAL, 1, 8000, 0),
    (8, JobType.DEBUG, 1, 500, 0),
    (5, JobType.DEBUG, 1, 1000, 0),
    (6, JobType.NORMAL, 2, 8000, 1),
    (4, JobType.LARGE, 4, 8000, 1),
    (2, JobType.LARGE, 8, 8000, 2),
    (3, JobType.CRITICAL, 1, 1000, 0),
)


# What is already running on a busy cluster: mostly small jobs, some gangs (mean ~2 GPUs).
_RUNNING_SHAPES: tuple[tuple[int, JobType, int, int, int], ...] = (
    (55, JobType.NORMAL, 1, 1000, 0),
    (15, JobType.NORMAL, 1, 2000, 0),
    (8, JobType.DEBUG, 1, 500, 0),
    (8, JobType.DEBUG, 1, 1000, 0),
    (8, JobType.NORMAL, 1, 4000, 0),
    (3, JobType.NORMAL, 1, 8000, 0),
    (2, JobType.LARGE, 2, 8000, 1),
    (1, JobType.CRITICAL, 1, 1000, 0),
)


def _spec(
    rng: random.Random,
    i: int,
    submit: float,
    shapes: tuple[tuple[int, JobType, int, int, int], ...] = _SHAPES,
) -> JobSpec:
    weights = [s[0] for s in shapes]
    _, job_type, tasks, gpu, tier = rng.choices(shapes, weights)[0]
    topology = TopologySpec(TopologyMode.HARD, tier) if tier else None
    return JobSpec(
        id=f"job-{i:06d}",
        name=f"job-{i:06d}",
        queue=rng.choice(_QUEUES),
        type=job_type,
        submit=submit,
        tasks=tasks,
        gpu=gpu,
        checkpoint=Checkpointing(3600.0, rng.choice((30.0, 60.0, 300.0)), True),
        expected_duration=rng.choice((None, 3600.0, 36000.0)),
        topology=topology,
    )


def build_snapshot(
    nodes: int, gpus_per_node: int, pending: int, running: int, seed: int = 1
) -> Snapshot:
    rng = random.Random(seed)
    cluster = expand_node_groups(
        [
            NodeGroup(
                prefix="node",
                count=nodes,
                gpus=gpus_per_node,
                gpu_model="H100",
                nvlink_island=max(gpus_per_node // 2, 1) if gpus_per_node >= 8 else 0,
                nodes_per_tier1=8,
                tier1_per_tier2=8,
            )
        ]
    )
    total = nodes * gpus_per_node
    queues = {
        name: Queue(name=name, weight=1, deserved=Resources(gpu=total * 1000 // len(_QUEUES)))
        for name in _QUEUES
    }
    now = 100_000.0
    room = Room(cluster)
    jobs: list[JobView] = []
    placed = 0
    i = 0
    attempts = 0
    while placed < running and attempts < running * 4:
        attempts += 1
        spec = _spec(rng, i, now - rng.uniform(600, 90_000), _RUNNING_SHAPES)
        i += 1
        placement = place_job(room, spec)
        if placement is None:
            continue
        started = spec.submit + rng.uniform(0, 300)
        jobs.append(
            JobView(
                spec=spec,
                state=JobState.RUNNING,
                placement=placement,
                first_start=started,
                running_since=started,
            )
        )
        placed += 1
    for _ in range(pending):
        jobs.append(JobView(spec=_spec(rng, i, now - rng.uniform(0, 3600)), state=JobState.PENDING))
        i += 1
    return Snapshot(
        now=now,
        nodes=cluster,
        queues=MappingProxyType(queues),
        jobs=tuple(jobs),
        config=PolicyConfig(),
        room=room,
    )


def build_saturated_snapshot(
    nodes: int, gpus_per_node: int, pending: int, running: int = 0, seed: int = 1
) -> Snapshot:
    """A full cluster of equal-priority work and a backlog whose every search must fail.

    Every GPU runs a `normal` job (1 to `gpus_per_node` GPUs) of one of four team queues, each
    queue holding exactly its deserved share (nothing to reclaim); one GPU of every tier-1
    domain runs a `critical` inference job (never a victim). The backlog: `normal` jobs
    (equal priority: nothing to preempt) and `large-job` gangs of one whole tier-1 domain
    with `hard` topology — they have candidates (normal jobs of their own queue), but no
    domain can ever be emptied, so the victim search runs and fails. `running` is ignored:
    the cluster is always full.
    """
    rng = random.Random(seed)
    per_tier1 = 8
    cluster = expand_node_groups(
        [
            NodeGroup(
                prefix="node",
                count=nodes,
                gpus=gpus_per_node,
                gpu_model="H100",
                nodes_per_tier1=per_tier1,
                tier1_per_tier2=8,
            )
        ]
    )
    now = 100_000.0
    room = Room(cluster)
    jobs: list[JobView] = []
    used = dict.fromkeys(_QUEUES, 0)
    i = 0

    def running_job(spec: JobSpec, node: int) -> None:
        nonlocal i
        task = fit_on_node(room, node, spec.gpu, 0, 0)
        assert task is not None, "the saturated cluster is filled node by node"
        room.take(task)
        placement = (task,)
        started = now - rng.uniform(600, 90_000)
        jobs.append(
            JobView(
                spec=spec,
                state=JobState.RUNNING,
                placement=placement,
                first_start=started,
                running_since=started,
            )
        )
        used[spec.queue] += spec.gpu * spec.tasks
        i += 1

    for index, node in enumerate(cluster):  # node by node, so every leaf gets its critical job
        free = node.gpus
        if index % per_tier1 == 0:
            running_job(_saturated_spec(i, "prod", JobType.CRITICAL, 1000, now - 90_000), index)
            free -= 1
        while free:
            gpus = min(free, rng.choice((1, 1, 1, 2, 4, 8)))
            queue = _QUEUES[i % len(_QUEUES)]
            running_job(_saturated_spec(i, queue, JobType.NORMAL, gpus * 1000, now - 90_000), index)
            free -= gpus
    queues = {
        name: Queue(name=name, weight=1, deserved=Resources(gpu=used[name])) for name in _QUEUES
    }
    gang = per_tier1 * gpus_per_node
    for _ in range(pending):
        queue = rng.choice(_QUEUES)
        submit = now - rng.uniform(0, 3600)
        if rng.random() < 0.2:
            spec = _saturated_spec(i, queue, JobType.LARGE, gpus_per_node * 1000, submit)
            spec = replace(
                spec,
                tasks=gang // gpus_per_node,
                min_available=gang // gpus_per_node,
                topology=TopologySpec(TopologyMode.HARD, 1),
            )
        else:
            spec = _saturated_spec(
                i, queue, JobType.NORMAL, rng.choice((1, 2, 4, 8)) * 1000, submit
            )
        jobs.append(JobView(spec=spec, state=JobState.PENDING))
        i += 1
    return Snapshot(
        now=now,
        nodes=cluster,
        queues=MappingProxyType(queues),
        jobs=tuple(jobs),
        config=PolicyConfig(),
        room=room,
    )


def _saturated_spec(i: int, queue: str, job_type: JobType, gpu: int, submit: float) -> JobSpec:
    return JobSpec(
        id=f"job-{i:06d}",
        name=f"job-{i:06d}",
        queue=queue,
        type=job_type,
        submit=submit,
        gpu=gpu,
        checkpoint=Checkpointing(3600.0, 60.0, True),
    )


CASES: dict[str, Callable[[int, int, int, int, int], Snapshot]] = {
    "busy": build_snapshot,
    "saturated": build_saturated_snapshot,
}
"""`busy`: fragmented free room and a mixed backlog; `saturated`: every search must fail."""


@dataclass(frozen=True)
class CycleBenchResult:
    nodes: int
    gpus: int
    pending: int
    running: int
    cycles: int
    samples_ms: tuple[float, ...]
    starts: int
    evictions: int
    snapshot_build_ms: float = 0.0
    case: str = "busy"
    cold_ms: float = 0.0  # the first cycle, with no memo from an earlier one
    memo_hits: int = 0  # victim searches the timed cycles skipped (core/shortcuts/memo.py)

    def as_dict(self) -> dict[str, Any]:
        ordered = sorted(self.samples_ms)
        return {
            "case": self.case,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "pending": self.pending,
            "running": self.running,
            "cycles": self.cycles,
            "p50_ms": round(percentile(ordered, 0.50), 3),
            "p95_ms": round(percentile(ordered, 0.95), 3),
            "p99_ms": round(percentile(ordered, 0.99), 3),
            "min_ms": round(ordered[0], 3),
            "max_ms": round(ordered[-1], 3),
            "starts_per_cycle": self.starts,
            "evictions_per_cycle": self.evictions,
            "snapshot_build_ms": round(self.snapshot_build_ms, 3),
            "cold_ms": round(self.cold_ms, 3),
            "memo_hits": self.memo_hits,
            "core": status(),  # compiled or interpreted (caldera/compiled.py)
        }


def bench_cycle(
    nodes: int,
    gpus_per_node: int,
    pending: int,
    running: int,
    cycles: int = 20,
    seed: int = 1,
    tick: Callable[[], None] | None = None,
    case: str = "busy",
) -> CycleBenchResult:
    snapshot = CASES[case](nodes, gpus_per_node, pending, running, seed)
    run(snapshot, CALDERA)  # warm-up: imports, caches
    began = time.perf_counter()
    decisions = run(snapshot, CALDERA)
    cold_ms = (time.perf_counter() - began) * 1000
    # A live runtime cycles about once a second and hands each cycle the last one's memo of
    # failed searches (core/shortcuts/memo.py); nothing is applied between these cycles, so each one
    # sees the state the last one did, one second later.
    samples: list[float] = []
    hits = 0
    for k in range(1, cycles + 1):
        current = replace(snapshot, now=snapshot.now + k, memo=decisions.memo)
        began = time.perf_counter()
        decisions = run(current, CALDERA)
        samples.append((time.perf_counter() - began) * 1000)
        hits += decisions.memo.hits if decisions.memo is not None else 0
        if tick is not None:
            tick()
    assert decisions is not None
    # What a runtime without incremental indexes would add to every cycle: the room and the
    # job index built from scratch from the same jobs.
    rebuild: list[float] = []
    for _ in range(3):
        began = time.perf_counter()
        Snapshot(snapshot.now, snapshot.nodes, snapshot.queues, snapshot.all_jobs, snapshot.config)
        rebuild.append((time.perf_counter() - began) * 1000)
    return CycleBenchResult(
        nodes=nodes,
        gpus=nodes * gpus_per_node,
        pending=pending,
        running=sum(1 for j in snapshot.all_jobs if j.state is JobState.RUNNING),
        cycles=cycles,
        samples_ms=tuple(samples),
        starts=len(decisions.starts),
        evictions=len(decisions.evictions),
        snapshot_build_ms=min(rebuild),
        case=case,
        cold_ms=cold_ms,
        memo_hits=hits,
    )
