"""The DESIGN §5 history metrics, computed one way for every runtime.

Each runtime feeds what it knows of each job (`JobHistory`: the simulator's job records, the
service's database rows) and gets back the same figures under the same names:

- `waits`: first start − submit, per job type, over jobs that started;
- `sla`: per type, the share of accepted jobs that started within the type's start SLO and
  were never evicted; jobs still waiting whose SLO has not yet run out, and jobs cancelled
  before they started, are left out (None for a type without SLO, or without such jobs);
- `large_job_max_wait`: the longest wait of a large job; one that never started waits until
  it ended (cancelled) or until `now` (still waiting);
- `wasted_gpu_seconds`: Σ work lost over evictions.

Jobs submitted before `since` (a warm-up) and rejected jobs are left out of waits and SLAs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from caldera.metrics_util import percentile
from caldera.model import JobState, JobType

__all__ = ["HistoryMetrics", "JobHistory", "history_metrics", "wait_stats"]

_CANCELLED = JobState.CANCELLED.value
_REJECTED = JobState.REJECTED.value
_LARGE = JobType.LARGE.value


@dataclass(frozen=True, slots=True)
class JobHistory:
    """What the metrics need of one job."""

    type: str
    state: str
    submit: float
    first_start: float | None
    end: float | None
    evictions: int
    lost_gpu_seconds: float


@dataclass
class HistoryMetrics:
    waits: dict[str, list[float]] = field(default_factory=dict)  # sorted, per type
    sla: dict[str, float | None] = field(default_factory=dict)
    large_job_max_wait: float | None = None
    wasted_gpu_seconds: float = 0.0


def history_metrics(
    jobs: Iterable[JobHistory],
    slo: Mapping[str, float | None],
    now: float,
    since: float = 0.0,
) -> HistoryMetrics:
    """The §5 history figures over `jobs`, as of `now`."""
    types = [t.value for t in JobType]
    waits: dict[str, list[float]] = {t: [] for t in types}
    total = dict.fromkeys(types, 0)
    met = dict.fromkeys(types, 0)
    large_max: float | None = None
    wasted = 0.0
    for job in jobs:
        wasted += job.lost_gpu_seconds
        if job.submit < since or job.state == _REJECTED:
            continue
        kind, start = job.type, job.first_start
        if start is not None:
            waits[kind].append(start - job.submit)
        if kind == _LARGE:
            until = start if start is not None else (job.end if job.end is not None else now)
            wait = until - job.submit
            large_max = wait if large_max is None else max(large_max, wait)
        limit = slo.get(kind)
        if limit is None:
            continue
        if start is None and (job.state == _CANCELLED or job.submit + limit > now):
            continue
        total[kind] += 1
        if start is not None and start - job.submit <= limit and job.evictions == 0:
            met[kind] += 1
    for values in waits.values():
        values.sort()
    sla = {
        kind: (met[kind] / total[kind] if slo.get(kind) is not None and total[kind] else None)
        for kind in types
    }
    return HistoryMetrics(waits, sla, large_max, wasted)


def wait_stats(values: list[float]) -> dict[str, Any]:
    """count, mean, p50, p95, p99 and max of sorted waits (None without any), in seconds."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    return {
        "count": len(values),
        "mean": round(sum(values) / len(values), 3),
        "p50": round(percentile(values, 0.50), 3),
        "p95": round(percentile(values, 0.95), 3),
        "p99": round(percentile(values, 0.99), 3),
        "max": round(values[-1], 3),
    }
