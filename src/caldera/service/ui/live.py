"""The dashboard's reads of the live runtime — through the read views the API uses
(`caldera.service.views`), never its lock or its jobs — and of the metrics registry (the
seeds' four numbers). Everything else comes from the store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from caldera.core import Waiting
from caldera.model import GPU_MILLI, Resources, deserved_shares
from caldera.service.ui.reads import GpuCell, NodeMap, QueueRow, Viewer, common_scale

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from caldera.service.views import ServiceRuntime

__all__ = [
    "SeedNumbers",
    "gpu_maps",
    "queue_rows",
    "seed_numbers",
    "state_counts",
    "waiting_reason",
    "waiting_reasons",
]


def _gpus(value: Resources | None) -> float | None:
    return value.gpu / GPU_MILLI if value is not None and value.gpu > 0 else None


def queue_rows(runtime: ServiceRuntime, viewer: Viewer, now: float) -> list[QueueRow]:
    """Every queue the viewer may use, with what it holds and waits for right now: each
    department followed by its teams (a department holds what its teams hold)."""
    views = runtime.queue_views()
    capacity = sum(node.capacity_milli for node in runtime.nodes)  # MIG slices too
    shares = deserved_shares({v.queue.name: v.queue for v in views}, capacity)
    by_name = {v.queue.name: v for v in views}
    ordered = []
    for view in sorted(views, key=lambda v: v.queue.name):
        if view.queue.parent is None:
            ordered.append(view)
            ordered.extend(
                by_name[n] for n in sorted(by_name) if by_name[n].queue.parent == view.queue.name
            )
    rows = []
    for view in ordered:
        queue = view.queue
        if not viewer.sees_queue(queue.name):
            continue
        since = view.throttled_since
        rows.append(
            QueueRow(
                name=queue.name,
                state=queue.state.value,
                weight=queue.weight,
                allocated=view.allocated / GPU_MILLI,
                deserved=shares[queue.name].gpu / GPU_MILLI,
                deserved_set=queue.deserved is not None,
                guarantee=_gpus(queue.guarantee),
                capability=_gpus(queue.capability),
                pending=view.pending,
                held=view.held,
                running=view.running,
                throttled_for=view.throttled_for,
                throttled_seconds=max(now - since, 0.0) if since is not None else None,
                throttled_name=_name(runtime, view.throttled_for),
                parent=queue.parent,
            )
        )
    return common_scale(rows)


def _name(runtime: ServiceRuntime, job_id: str | None) -> str:
    found = runtime.store.job(job_id) if job_id else None
    return str(found["name"]) if found else ""


def state_counts(rows: Iterable[QueueRow]) -> dict[str, int]:
    """Live jobs by state over the viewer's queues (Running counts Releasing)."""
    counts = {"Held": 0, "Pending": 0, "Running": 0}
    for row in rows:
        counts["Held"] += row.held
        counts["Pending"] += row.pending
        counts["Running"] += row.running
    return counts


def gpu_maps(runtime: ServiceRuntime, viewer: Viewer) -> list[NodeMap]:
    """Each node's devices: the share free, who holds them (a job of a queue the viewer may
    not see shows as its queue), whether they are being released or drained."""
    cluster = runtime.cluster_view()

    def shown(job: str) -> str:
        queue = cluster.queue_of.get(job, "")
        return job if viewer.sees_queue(queue) else queue or "another queue"

    def name(job: str) -> str:
        seen = viewer.sees_queue(cluster.queue_of.get(job, ""))
        return cluster.name_of.get(job, "") if seen else ""

    return [
        NodeMap(
            name=view.name,
            gpu_model=view.gpu_model,
            tier1=node.tier1,
            tier2=node.tier2,
            cells=tuple(
                GpuCell(
                    index=d.index,
                    free=d.free / GPU_MILLI,
                    holders=tuple(h for h, _ in _unique((shown(j), name(j)) for j in d.jobs)),
                    names=tuple(n for _, n in _unique((shown(j), name(j)) for j in d.jobs)),
                    releasing=d.releasing,
                    drained=d.drained,
                )
                for d in view.devices
            ),
        )
        for node, view in zip(runtime.nodes, cluster.nodes, strict=True)
    ]


def _unique(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(holder, name) pairs once each, by holder, in order (a queue shown for two jobs once)."""
    found: dict[str, str] = {}
    for holder, name in pairs:
        found.setdefault(holder, name)
    return list(found.items())


def waiting_reason(runtime: ServiceRuntime, job_id: str) -> Waiting | None:
    """The reason the last cycle gave for a pending job not starting (None: not pending)."""
    return runtime.waiting_for([job_id]).get(job_id)


def waiting_reasons(runtime: ServiceRuntime, job_ids: Iterable[str]) -> dict[str, Waiting]:
    return runtime.waiting_for(job_ids)


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
