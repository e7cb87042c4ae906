"""Everything the simulator reports: the event log, per-job records and the §5 metrics.

GPU time is integrated piecewise between instants from counters kept up to date by the
engine: allocated (held by any job), useful (held by gangs making progress) and releasing
(held inside a grace period); what is left of allocated is gang hang (held by a job running
below `min_available`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from caldera.core import Evict, EvictReason, TaskPlacement
from caldera.model import GPU_MILLI
from caldera.sim.metrics import compute_metrics

if TYPE_CHECKING:
    from caldera.sim.engine import SimJob, Simulator

__all__ = ["Recorder"]


def _round(value: float) -> float:
    return round(value, 6)


def _gpus(milli: int) -> float | int:
    return milli // GPU_MILLI if milli % GPU_MILLI == 0 else milli / GPU_MILLI


class Recorder:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.events: list[dict[str, Any]] = []
        self.capacity = sum(n.capacity_milli for n in sim.nodes)  # MIG slices included
        self.allocated = 0
        self.useful = 0
        self.releasing = 0
        self.pending_demand = 0
        self.area_allocated = 0.0
        self.area_useful = 0.0
        self.area_hung = 0.0
        self.area_demand = 0.0
        self.last_t: float | None = None
        self.first_t: float | None = None
        self.series: list[tuple[float, float]] = []
        self.preempt_victim: Counter[str] = Counter()
        self.preempt_preemptor: Counter[str] = Counter()
        self.preempt_reason: Counter[str] = Counter()
        self.critical_preempted = 0
        self.gang_hang_events = 0
        self.throttle_episodes = 0
        self.lost_by_day: dict[int, float] = {}
        # Metrics count from `measure_from` (the scenario's warm-up); before it the recorder
        # only keeps the event log, the series and the safety counter critical_preempted.
        self.measure_from = float(getattr(sim.scenario, "warmup", 0.0) or 0.0)
        self.lost_measured = 0.0

    # -- time ------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        if self.last_t is None:
            self.last_t = t
            self.first_t = t
            return
        dt = t - self.last_t
        if dt > 0:
            if t > self.measure_from:
                span = dt if self.last_t >= self.measure_from else t - self.measure_from
                hung = max(self.allocated - self.useful - self.releasing, 0)
                self.area_allocated += self.allocated * span
                self.area_useful += self.useful * span
                self.area_hung += hung * span
                self.area_demand += min(self.capacity, self.allocated + self.pending_demand) * span
            if not self.series or self.series[-1][1] != self.allocated:
                self.series.append((self.last_t, self.allocated / GPU_MILLI))
        self.last_t = t

    def finish(self, t: float) -> None:
        self.advance(t)
        self.series.append((t, self.allocated / GPU_MILLI))

    # -- counters --------------------------------------------------------------------------

    def take(self, tasks: Iterable[TaskPlacement]) -> None:
        self.allocated += sum(t.gpu for t in tasks)

    def give(self, tasks: Iterable[TaskPlacement]) -> None:
        self.allocated -= sum(t.gpu for t in tasks)

    # -- events ----------------------------------------------------------------------------

    def event(self, kind: str, job: str | None, **fields: Any) -> None:
        record: dict[str, Any] = {"t": _round(self.sim.now), "kind": kind, "job": job}
        record.update({k: v for k, v in fields.items() if v is not None})
        self.events.append(record)

    def start(self, job: SimJob, placement: tuple[TaskPlacement, ...], grow: bool) -> None:
        if job.running_since is not None:  # extra tasks of a gang already making progress
            self.useful += sum(t.gpu for t in placement)
        by_node: dict[str, int] = {}
        nodes = self.sim.nodes
        for task in placement:
            name = nodes[task.node].name
            by_node[name] = by_node.get(name, 0) + task.gpu
        total = sum(by_node.values())
        fields: dict[str, Any] = {
            "placement": {name: _gpus(milli) for name, milli in by_node.items() if milli > 0},
            "gpus": _gpus(total),
            "tasks": len(placement),
        }
        if grow:
            fields["grow"] = True
        self.event("start", job.spec.id, **fields)

    def evict(
        self,
        job: SimJob,
        evict: Evict,
        leaving: list[TaskPlacement],
        released_at: float,
        lost: float,
        cut: bool = False,
    ) -> None:
        """`cut`: this eviction took a progressing gang below `min_available` (it now hangs);
        cutting an already hanging gang further is not a new gang-hang event."""
        gpu = sum(t.gpu for t in leaving)
        self.releasing += gpu
        measured = self.sim.now >= self.measure_from
        if job.running_since is not None:  # only extra tasks left; the gang goes on
            self.useful -= gpu
        elif cut and measured:
            self.gang_hang_events += 1
        victim_type = job.spec.type.value
        preemptor = self.sim.jobs.get(evict.preemptor) if evict.preemptor else None
        if evict.reason is not EvictReason.CANCEL:  # a user's cancel is not a preemption
            if measured:
                self.preempt_reason[evict.reason.value] += 1
                self.preempt_victim[victim_type] += 1
                if preemptor is not None:
                    self.preempt_preemptor[preemptor.spec.type.value] += 1
            if job.spec.priority >= 1000:  # a safety counter: counted in the warm-up too
                self.critical_preempted += 1
        if measured:
            self.lost_measured += lost
        day = int(self.sim.now // 86400)
        self.lost_by_day[day] = self.lost_by_day.get(day, 0.0) + lost
        self.events.append(
            {
                "t": _round(self.sim.now),
                "kind": "evict",
                "job": job.spec.id,
                "preemptor": evict.preemptor,
                "reason": evict.reason.value,
                "released_at": _round(released_at),
                "gpus": _gpus(gpu),
                "tasks": len(leaving),
                "lost_gpu_seconds": _round(lost),
            }
        )

    def release_room(self, gpu: int) -> None:
        self.releasing -= gpu

    def throttle_on(self, queue: str, job: str) -> None:
        if self.sim.now >= self.measure_from:
            self.throttle_episodes += 1
        self.event("throttle_on", None, queue=queue, large_job=job)

    def throttle_off(self, queue: str, reason: str) -> None:
        self.event("throttle_off", None, queue=queue, reason=reason)

    # -- results ---------------------------------------------------------------------------

    def job_records(self) -> list[dict[str, Any]]:
        records = []
        for job in self.sim.jobs.values():
            spec = job.spec
            if not job.submitted:
                continue  # its submit time lies after the end of the run
            records.append(
                {
                    "name": spec.name,
                    "type": spec.type.value,
                    "queue": spec.queue,
                    "submit": _round(spec.submit),
                    "start": None if job.first_start is None else _round(job.first_start),
                    "end": None if job.end_time is None else _round(job.end_time),
                    "state": job.state.value,
                    "evictions": job.evictions,
                    "lost_gpu_seconds": _round(job.lost_gpu_seconds),
                    "tasks": spec.tasks,
                    "gpus": _gpus(spec.gpu * spec.tasks),
                }
            )
        return records

    def result(self) -> dict[str, Any]:
        jobs = self.job_records()
        return {
            "policy": self.sim.config.name,
            "metrics": compute_metrics(self, jobs),
            "jobs": jobs,
            "events": self.events,
        }
