"""One measurement for every runtime: the seeds' metrics from what happened to each job's tasks.

A `Timeline` is fed occurrences — a job submitted, tasks bound, tasks signalled to leave (an
eviction, with the work it lost), tasks gone, a job finished — from a simulator run's event log
(`from_simulation`) or from what the API server showed on a real control plane
(`caldera.replay.observe`). `Timeline.result(factor)` sweeps them in time order and computes
the §5 metrics under the simulator's names and meanings (caldera.sim.metrics), in scenario
seconds (times multiplied by the compression `factor`), so that `caldera.report` tabulates and
plots a Kubernetes run like a simulated one. Measuring a simulator run both ways gives the same
figures (tests/replay/test_measure.py): the two paths differ only in where the occurrences come
from.

GPU time, as the simulator's recorder counts it: a task holds its GPUs from binding until it is
gone (through its grace period); a job *progresses* while at least `min_available` of its tasks
run and are not leaving; GPUs held by a job with some but fewer tasks running are gang hang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from caldera.model import GPU_MILLI, JobSpec
from caldera.runtime.metrics import JobHistory, history_metrics, wait_stats

__all__ = ["JobLog", "Occurrence", "Timeline", "from_simulation"]

_WEEK = 7 * 86_400.0
# At one instant: jobs end, arrive, are evicted, release what they held (a task that exits at
# once on SIGTERM is released at its eviction's instant, so after it), then bind.
_ORDER = {"finish": 0, "submit": 1, "reject": 1, "evict": 2, "release": 3, "bind": 4}


@dataclass(frozen=True, slots=True)
class Occurrence:
    t: float
    kind: str  # submit, reject, bind, evict, release, finish, cancel
    job: str
    tasks: int = 0
    lost: float = 0.0  # GPU-seconds of work lost (evict)
    preemptor: str | None = None
    reason: str = "preempt"  # evict: preempt, reclaim, cancel, … (cancel is no preemption)


@dataclass
class JobLog:
    spec: JobSpec
    submit: float | None = None
    first_start: float | None = None
    end: float | None = None
    state: str = "Pending"
    evictions: int = 0
    lost: float = 0.0
    running: int = 0
    releasing: int = 0
    rejected: bool = False


def _gpus(milli: int) -> float | int:
    return milli // GPU_MILLI if milli % GPU_MILLI == 0 else milli / GPU_MILLI


@dataclass
class Timeline:
    """Occurrences of one run, in that run's seconds. `capacity`: the pool's milli-GPUs;
    `warmup`, `end`: in the run's seconds; `slo`: start SLOs in scenario seconds."""

    specs: Mapping[str, JobSpec]
    capacity: int
    slo: Mapping[str, float | None]
    warmup: float = 0.0
    end: float | None = None
    occurrences: list[Occurrence] = field(default_factory=list)

    def add(self, occurrence: Occurrence) -> None:
        self.occurrences.append(occurrence)

    def result(self, label: str, factor: float = 1.0) -> dict[str, Any]:
        """The §6 result document (`policy`, `metrics`, `jobs`, `events`) and the utilization
        series, in scenario seconds: every time and every GPU-second times `factor`."""
        return _Sweep(self, factor).run(label)


class _Sweep:
    def __init__(self, timeline: Timeline, factor: float) -> None:
        self.timeline = timeline
        self.factor = factor
        self.jobs: dict[str, JobLog] = {}
        self.allocated = 0
        self.useful = 0
        self.releasing = 0
        self.pending = 0
        self.area = {"allocated": 0.0, "useful": 0.0, "hung": 0.0, "demand": 0.0}
        self.series: list[tuple[float, float]] = []
        self.events: list[dict[str, Any]] = []
        self.victims: Counter[str] = Counter()
        self.preemptors: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.critical_preempted = 0
        self.hang_events = 0
        self.lost_measured = 0.0
        self.first: float | None = None
        self.last: float | None = None

    # -- GPU time -----------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        if self.last is None:
            self.first = self.last = t
            return
        start = max(self.last, self.timeline.warmup)
        if t > start:
            span = t - start
            hung = max(self.allocated - self.useful - self.releasing, 0)
            capacity = self.timeline.capacity
            self.area["allocated"] += self.allocated * span
            self.area["useful"] += self.useful * span
            self.area["hung"] += hung * span
            self.area["demand"] += min(capacity, self.allocated + self.pending) * span
        if t > self.last:
            if not self.series or self.series[-1][1] != self.allocated / GPU_MILLI:
                self.series.append((self.last * self.factor, self.allocated / GPU_MILLI))
            self.last = t

    def _counts(self, job: JobLog, running: int, releasing: int) -> None:
        """Change a job's running and releasing tasks, keeping the pool's counters."""
        spec = job.spec
        before_useful = job.running * spec.gpu if job.running >= spec.min_available else 0
        self.allocated += (running + releasing - job.running - job.releasing) * spec.gpu
        self.releasing += (releasing - job.releasing) * spec.gpu
        job.running, job.releasing = running, releasing
        after_useful = running * spec.gpu if running >= spec.min_available else 0
        self.useful += after_useful - before_useful

    def _pending(self, job: JobLog) -> int:
        """Milli-GPUs a job waits for: its gang, while admitted, unfinished and holding none."""
        waiting = (
            job.submit is not None
            and not job.rejected
            and job.end is None
            and job.running == 0
            and job.releasing == 0
        )
        return job.spec.gang_request.gpu if waiting else 0

    # -- occurrences --------------------------------------------------------------------------

    def run(self, label: str) -> dict[str, Any]:
        timeline = self.timeline
        ordered = sorted(
            enumerate(timeline.occurrences), key=lambda p: (p[1].t, _ORDER.get(p[1].kind, 5), p[0])
        )
        end = timeline.end
        for _, occ in ordered:
            if end is not None and occ.t > end:
                break
            self._advance(occ.t)
            job = self.jobs.get(occ.job)
            if job is None:
                spec = timeline.specs.get(occ.job)
                if spec is None:
                    continue
                job = self.jobs[occ.job] = JobLog(spec)
            before = self._pending(job)
            getattr(self, f"_{occ.kind}")(job, occ)
            self.pending += self._pending(job) - before
        final = end if end is not None else (self.last if self.last is not None else 0.0)
        self._advance(final)
        self.series.append((final * self.factor, self.allocated / GPU_MILLI))
        jobs = self._records()
        return {
            "policy": label,
            "metrics": self._metrics(jobs, final),
            "jobs": jobs,
            "events": self.events,
            "series": self.series,
        }

    def _event(self, occ: Occurrence, **fields: Any) -> None:
        record: dict[str, Any] = {"t": round(occ.t * self.factor, 6), "kind": occ.kind}
        record["job"] = occ.job
        record.update({k: v for k, v in fields.items() if v is not None})
        self.events.append(record)

    def _submit(self, job: JobLog, occ: Occurrence) -> None:
        job.submit = occ.t
        self._event(occ)

    def _reject(self, job: JobLog, occ: Occurrence) -> None:
        job.rejected = True
        job.state = "Rejected"
        self._event(occ)

    def _bind(self, job: JobLog, occ: Occurrence) -> None:
        """Tasks bound; the job has started once `min_available` of them run (a runtime that
        binds a gang pod by pod starts it when the last of its minimum is bound)."""
        job.state = "Running"
        self._counts(job, job.running + occ.tasks, job.releasing)
        if job.first_start is None and job.running >= job.spec.min_available:
            job.first_start = occ.t
        self._event(occ, tasks=occ.tasks, gpus=_gpus(occ.tasks * job.spec.gpu))

    def _evict(self, job: JobLog, occ: Occurrence) -> None:
        spec = job.spec
        tasks = min(occ.tasks, job.running)
        progressing = job.running >= spec.min_available
        staying = job.running - tasks
        cut = progressing and 0 < staying < spec.min_available
        measured = occ.t >= self.timeline.warmup
        if occ.reason != "cancel":
            job.evictions += 1
            if measured:
                self.victims[spec.type.value] += 1
                self.reasons[occ.reason] += 1
                preemptor = self.timeline.specs.get(occ.preemptor or "")
                if preemptor is not None:
                    self.preemptors[preemptor.type.value] += 1
            if spec.priority >= 1000:
                self.critical_preempted += 1
        if cut and measured:
            self.hang_events += 1
        job.lost += occ.lost
        if measured:
            self.lost_measured += occ.lost
        if staying == 0:
            job.state = "Releasing"
        self._counts(job, staying, job.releasing + tasks)
        self._event(
            occ,
            preemptor=occ.preemptor,
            reason=occ.reason,
            gpus=_gpus(tasks * spec.gpu),
            tasks=tasks,
            lost_gpu_seconds=round(occ.lost * self.factor, 6),
        )

    def _release(self, job: JobLog, occ: Occurrence) -> None:
        tasks = min(occ.tasks, job.releasing)
        self._counts(job, job.running, job.releasing - tasks)
        if job.running == 0 and job.releasing == 0 and job.end is None:
            job.state = "Pending"

    def _finish(self, job: JobLog, occ: Occurrence) -> None:
        job.end = occ.t
        job.state = "Succeeded"
        self._counts(job, 0, job.releasing)
        self._event(occ)

    def _cancel(self, job: JobLog, occ: Occurrence) -> None:
        job.end = occ.t
        job.state = "Cancelled"
        self._event(occ)

    # -- results ------------------------------------------------------------------------------

    def _records(self) -> list[dict[str, Any]]:
        f = self.factor
        records = []
        for job in self.jobs.values():
            if job.submit is None:
                continue
            spec = job.spec
            records.append(
                {
                    "name": spec.name,
                    "type": spec.type.value,
                    "queue": spec.queue,
                    "submit": round(job.submit * f, 6),
                    "start": None if job.first_start is None else round(job.first_start * f, 6),
                    "end": None if job.end is None else round(job.end * f, 6),
                    "state": job.state,
                    "evictions": job.evictions,
                    "lost_gpu_seconds": round(job.lost * f, 6),
                    "tasks": spec.tasks,
                    "gpus": _gpus(spec.gpu * spec.tasks),
                }
            )
        return records

    def _metrics(self, jobs: list[dict[str, Any]], final: float) -> dict[str, Any]:
        f = self.factor
        timeline = self.timeline
        warmup = timeline.warmup * f
        begin = max(self.first or 0.0, timeline.warmup) * f
        end = final * f
        observed = max(end - begin, 0.0)
        history = history_metrics(
            (
                JobHistory(j["type"], j["state"], j["submit"], j["start"], j["end"],
                           j["evictions"], j["lost_gpu_seconds"])
                for j in jobs
            ),
            timeline.slo,
            now=end,
            since=warmup,
        )  # fmt: skip
        large_max = history.large_job_max_wait
        capacity_seconds = timeline.capacity * observed
        area = {key: value * f for key, value in self.area.items()}
        wasted_hours = self.lost_measured * f / 3600
        days = observed / 86_400
        return {
            "wait": {kind: wait_stats(values) for kind, values in history.waits.items()},
            "sla_attainment": {
                kind: None if share is None else round(share, 6)
                for kind, share in history.sla.items()
            },
            "wasted_gpu_hours": round(wasted_hours, 6),
            "wasted_gpu_hours_per_day": round(wasted_hours / days, 6) if days else 0.0,
            "preemptions": {
                "total": sum(self.victims.values()),
                "by_victim_type": dict(sorted(self.victims.items())),
                "by_preemptor_type": dict(sorted(self.preemptors.items())),
                "by_reason": dict(sorted(self.reasons.items())),
            },
            "critical_preempted": self.critical_preempted,
            "gang_hang_gpu_hours": round(area["hung"] / GPU_MILLI / 3600, 6),
            "gang_hang_events": self.hang_events,
            "gpu_utilization": round(area["allocated"] / capacity_seconds, 6)
            if capacity_seconds
            else 0.0,
            "useful_gpu_utilization": round(area["useful"] / capacity_seconds, 6)
            if capacity_seconds
            else 0.0,
            "gpu_allocation_rate": round(min(area["allocated"] / area["demand"], 1.0), 6)
            if area["demand"]
            else 0.0,
            "large_job_max_wait": None if large_max is None else round(large_max, 3),
            "observed_seconds": round(observed, 3),
            "gpus": timeline.capacity // GPU_MILLI,
        }


def from_simulation(
    result: Mapping[str, Any],
    specs: Mapping[str, JobSpec],
    capacity: int,
    slo: Mapping[str, float | None],
    warmup: float,
    end: float | None,
    rename: Mapping[str, str] | None = None,
) -> Timeline:
    """A Timeline from a simulator result's event log (caldera.sim.recorder). `specs` are keyed
    by the names the timeline should use; `rename` maps the simulator's job ids to them."""
    timeline = Timeline(specs, capacity, slo, warmup, end)
    for event in _sim_occurrences(result["events"], rename or {}):
        timeline.add(event)
    return timeline


def _sim_occurrences(
    events: Iterable[Mapping[str, Any]], rename: Mapping[str, str]
) -> Iterable[Occurrence]:
    for event in events:
        kind, t = event["kind"], float(event["t"])
        job = rename.get(event.get("job") or "", event.get("job") or "")
        if kind in ("submit", "reject", "finish"):
            yield Occurrence(t, kind, job)
        elif kind == "start":
            yield Occurrence(t, "bind", job, tasks=int(event["tasks"]))
        elif kind == "evict":
            tasks = int(event["tasks"])
            yield Occurrence(
                t,
                "evict",
                job,
                tasks=tasks,
                lost=float(event.get("lost_gpu_seconds", 0.0)),
                preemptor=rename.get(event.get("preemptor") or "", event.get("preemptor")),
                reason=str(event.get("reason", "preempt")),
            )
            yield Occurrence(float(event["released_at"]), "release", job, tasks=tasks)
        elif kind == "cancel":
            yield Occurrence(t, "cancel", job)
