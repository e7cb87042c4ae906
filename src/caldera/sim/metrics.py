"""The §5 metrics, under the same names everywhere.

- `wait`: first start − submit, per job type, over jobs that started (count, mean, p50, p95,
  p99, max, seconds).
- `sla_attainment`: per type, the share of accepted jobs that started within the type's start
  SLO and were never evicted; jobs still waiting whose SLO had not yet run out when the run
  ended, and jobs cancelled before starting, are left out. None for a type without SLO.
- `wasted_gpu_hours`: Σ GPUs × work lost over evictions; `wasted_gpu_hours_per_day` divides by
  the observed days.
- `preemptions`: evictions, total and by victim type, preemptor type and reason.
- `gang_hang_gpu_hours`: GPU time held by jobs running below `min_available`;
  `gang_hang_events`: how many times a gang was cut below its minimum.
- `gpu_utilization`: allocated GPU time / (GPUs × observed time), observed from the first
  submission to the end of the run; `useful_gpu_utilization` counts only gangs making
  progress; `gpu_allocation_rate`: allocated GPU time / the GPU time that could have been
  allocated (capacity, or allocated plus pending demand when that is smaller).
- `large_job_max_wait`: the longest wait of a large job, counting a large job still waiting
  at the end up to the end; None without large jobs.
- `throttle_episodes`, `throttle_held_seconds`.

With a warm-up (`workload.warmup`), everything above is measured from the end of the warm-up:
jobs submitted before it are left out of waits and SLAs, and GPU time, evictions, lost work and
gang-hang events before it do not count (`critical_preempted` counts all: it must be 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caldera.metrics_util import percentile
from caldera.model import GPU_MILLI, JobType

if TYPE_CHECKING:
    from caldera.sim.recorder import Recorder

__all__ = ["compute_metrics", "percentile", "wait_stats"]


def wait_stats(waits: list[float]) -> dict[str, Any]:
    values = sorted(waits)
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


def compute_metrics(recorder: Recorder, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    end = recorder.last_t if recorder.last_t is not None else 0.0
    begin = recorder.first_t if recorder.first_t is not None else 0.0
    warmup = recorder.measure_from
    if warmup:
        begin = max(begin, warmup)
    observed = max(end - begin, 0.0)
    slo = recorder.sim.config.slo
    waits: dict[str, list[float]] = {t.value: [] for t in JobType}
    sla_total: dict[str, int] = dict.fromkeys(waits, 0)
    sla_met: dict[str, int] = dict.fromkeys(waits, 0)
    large_max: float | None = None
    wasted = 0.0
    for job in jobs:
        kind = job["type"]
        wasted += job["lost_gpu_seconds"]
        if job["submit"] < warmup:
            continue
        if job["state"] == "Rejected":
            continue
        start = job["start"]
        if start is not None:
            waits[kind].append(start - job["submit"])
        if kind == JobType.LARGE.value:
            wait = (start if start is not None else end) - job["submit"]
            large_max = wait if large_max is None else max(large_max, wait)
        limit = slo.get(kind)
        if limit is None:
            continue
        if start is None and (job["state"] == "Cancelled" or job["submit"] + limit > end):
            continue
        sla_total[kind] += 1
        if start is not None and start - job["submit"] <= limit and job["evictions"] == 0:
            sla_met[kind] += 1
    capacity_seconds = recorder.capacity * observed
    days = observed / 86400 if observed > 0 else 0.0
    if warmup:
        wasted = recorder.lost_measured
    wasted_hours = wasted / 3600
    return {
        "wait": {kind: wait_stats(values) for kind, values in waits.items()},
        "sla_attainment": {
            kind: (
                None
                if slo.get(kind) is None
                else (round(sla_met[kind] / sla_total[kind], 6) if sla_total[kind] else None)
            )
            for kind in waits
        },
        "wasted_gpu_hours": round(wasted_hours, 6),
        "wasted_gpu_hours_per_day": round(wasted_hours / days, 6) if days else 0.0,
        "preemptions": {
            "total": sum(recorder.preempt_victim.values()),
            "by_victim_type": dict(sorted(recorder.preempt_victim.items())),
            "by_preemptor_type": dict(sorted(recorder.preempt_preemptor.items())),
            "by_reason": dict(sorted(recorder.preempt_reason.items())),
        },
        "critical_preempted": recorder.critical_preempted,
        "gang_hang_gpu_hours": round(recorder.area_hung / GPU_MILLI / 3600, 6),
        "gang_hang_events": recorder.gang_hang_events,
        "gpu_utilization": round(recorder.area_allocated / capacity_seconds, 6)
        if capacity_seconds
        else 0.0,
        "useful_gpu_utilization": round(recorder.area_useful / capacity_seconds, 6)
        if capacity_seconds
        else 0.0,
        "gpu_allocation_rate": round(min(recorder.area_allocated / recorder.area_demand, 1.0), 6)
        if recorder.area_demand
        else 0.0,
        "large_job_max_wait": None if large_max is None else round(large_max, 3),
        "throttle_episodes": recorder.throttle_episodes,
        "throttle_held_seconds": round(recorder.throttle_held, 3),
        "observed_seconds": round(observed, 3),
        "gpus": recorder.capacity // GPU_MILLI,
    }
