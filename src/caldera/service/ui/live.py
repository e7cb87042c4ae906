"""The dashboard's reads of the live runtime (queues, GPUs, why a job waits) and of the
metrics registry (the seeds' four numbers). Everything else comes from the store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from caldera.core import Waiting
from caldera.model import GPU_MILLI, JobState
from caldera.service.ui.reads import GpuCell, NodeMap, QueueRow, Viewer

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from caldera.service.runtime import Runtime

__all__ = [
    "SeedNumbers",
    "gpu_maps",
    "queue_rows",
    "seed_numbers",
    "state_counts",
    "waiting_reason",
    "waiting_reasons",
]


def _gpus(value: Any) -> float | None:
    return value.gpu / GPU_MILLI if value is not None and value.gpu > 0 else None


def queue_rows(runtime: Runtime, viewer: Viewer) -> list[QueueRow]:
    """Every queue the viewer may use, with what it holds and waits for right now."""
    now = runtime.clock()
    counts: dict[str, list[int]] = {}  # queue -> [allocated milli, pending, held, running]
    with runtime.lock:
        queues = dict(runtime.queues)
        throttles = dict(runtime.throttles)
        for job in runtime.jobs.values():
            entry = counts.setdefault(job.spec.queue, [0, 0, 0, 0])
            entry[0] += sum(t.placement.gpu for t in job.tasks)
            if job.state is JobState.PENDING:
                entry[1] += 1
            elif job.state is JobState.HELD:
                entry[2] += 1
            elif job.state in (JobState.RUNNING, JobState.RELEASING):
                entry[3] += 1
    capacity = runtime.room.capacity_gpus
    weights = sum(max(q.weight, 0) for q in queues.values()) or 1
    rows = []
    for name, queue in sorted(queues.items()):
        if not viewer.sees_queue(name):
            continue
        allocated, pending, held, running = counts.get(name, [0, 0, 0, 0])
        deserved = _gpus(queue.deserved)
        throttle = throttles.get(name)
        rows.append(
            QueueRow(
                name=name,
                state=queue.state.value,
                weight=queue.weight,
                allocated=allocated / GPU_MILLI,
                deserved=deserved
                if deserved is not None
                else round(capacity * max(queue.weight, 0) / weights, 3),
                deserved_set=deserved is not None,
                guarantee=_gpus(queue.guarantee),
                capability=_gpus(queue.capability),
                pending=pending,
                held=held,
                running=running,
                throttled_for=throttle.job if throttle else None,
                throttled_seconds=max(now - throttle.since, 0.0) if throttle else None,
            )
        )
    return rows


def gpu_maps(runtime: Runtime, viewer: Viewer) -> list[NodeMap]:
    """Each node's devices: the share free, who holds them, whether they are being released."""
    holders: dict[tuple[int, int], list[str]] = {}
    leaving: set[tuple[int, int]] = set()
    with runtime.lock:
        free = [list(f) for f in runtime.room.free]
        for job in runtime.jobs.values():
            shown = job.id if viewer.sees_queue(job.spec.queue) else job.spec.queue
            for task in job.tasks:
                for device in task.placement.devices:
                    spot = (task.placement.node, device)
                    if shown not in holders.setdefault(spot, []):
                        holders[spot].append(shown)
                    if task.leaving:
                        leaving.add(spot)
    return [
        NodeMap(
            name=node.name,
            gpu_model=node.gpu_model,
            tier1=node.tier1,
            tier2=node.tier2,
            cells=tuple(
                GpuCell(
                    index=d,
                    free=free[node.index][d] / GPU_MILLI,
                    holders=tuple(holders.get((node.index, d), ())),
                    releasing=(node.index, d) in leaving,
                )
                for d in range(node.gpus)
            ),
        )
        for node in runtime.nodes
    ]


def state_counts(runtime: Runtime, viewer: Viewer) -> dict[str, int]:
    """Live jobs by state, in the queues the viewer may use."""
    states: dict[str, int] = {}
    with runtime.lock:
        for job in runtime.jobs.values():
            if viewer.sees_queue(job.spec.queue):
                states[job.state.value] = states.get(job.state.value, 0) + 1
    return states


def waiting_reason(runtime: Runtime, job_id: str) -> Waiting | None:
    """The reason the last cycle gave for a pending job not starting (None: not pending)."""
    return waiting_reasons(runtime, [job_id]).get(job_id)


def waiting_reasons(runtime: Runtime, job_ids: Iterable[str]) -> dict[str, Waiting]:
    """The last cycle's reasons for those of `job_ids` that are pending."""
    found: dict[str, Waiting] = {}
    with runtime.lock:
        reasons = runtime.waiting
        for job_id in job_ids:
            job = runtime.jobs.get(job_id)
            if job is not None and job.state is JobState.PENDING:
                reason = reasons.reason(job.spec)
                if reason is not None:
                    found[job_id] = reason
    return found


@dataclass(frozen=True)
class SeedNumbers:
    """The seeds' four numbers, as /metrics has them now."""

    critical_sla: float | None  # share; None before any critical job counts
    wasted_gpu_hours: float  # since the first job, from the database
    gang_hang_gpu_hours: float  # since this server started
    gpu_utilization: float  # allocated share since this server started


_SEED_SAMPLES = {
    ("caldera_sla_attainment", (("type", "critical"),)): "critical_sla",
    ("caldera_wasted_gpu_hours", ()): "wasted_gpu_hours",
    ("caldera_gang_hang_gpu_hours", ()): "gang_hang_gpu_hours",
    ("caldera_gpu_utilization", ()): "gpu_utilization",
}


def seed_numbers(registry: CollectorRegistry) -> SeedNumbers:
    """One collection of the registry (each computes the history metrics from the database)."""
    found: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            field = _SEED_SAMPLES.get((sample.name, tuple(sorted(sample.labels.items()))))
            if field is not None:
                found[field] = sample.value
    return SeedNumbers(
        critical_sla=found.get("critical_sla"),
        wasted_gpu_hours=found.get("wasted_gpu_hours", 0.0),
        gang_hang_gpu_hours=found.get("gang_hang_gpu_hours", 0.0),
        gpu_utilization=found.get("gpu_utilization", 0.0),
    )
