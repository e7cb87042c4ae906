"""The §5 metrics of a simulation, under the same names everywhere (the history part is
`caldera.runtime.metrics`, shared with the service).

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
  at the end up to the end (one cancelled before it started: up to its cancel); None
  without large jobs.
- `throttle_episodes`, `throttle_held_seconds`.

With a warm-up (`workload.warmup`), everything above is measured from the end of the warm-up:
jobs submitted before it are left out of waits and SLAs, and GPU time, evictions, lost work and
gang-hang events before it do not count (`critical_preempted` counts all: it must be 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caldera.model import GPU_MILLI
from caldera.runtime.metrics import JobHistory, history_metrics, wait_stats

if TYPE_CHECKING:
    from caldera.sim.recorder import Recorder

__all__ = ["compute_metrics", "wait_stats"]


def compute_metrics(recorder: Recorder, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    end = recorder.last_t if recorder.last_t is not None else 0.0
    begin = recorder.first_t if recorder.first_t is not None else 0.0
    warmup = recorder.measure_from
    if warmup:
        begin = max(begin, warmup)
    observed = max(end - begin, 0.0)
    slo = recorder.sim.config.slo
    history = history_metrics(
        (
            JobHistory(
                j["type"],
                j["state"],
                j["submit"],
                j["start"],
                j["end"],
                j["evictions"],
                j["lost_gpu_seconds"],
            )
            for j in jobs
        ),
        slo,
        now=end,
        since=warmup,
    )
    large_max = history.large_job_max_wait
    wasted = history.wasted_gpu_seconds
    capacity_seconds = recorder.capacity * observed
    days = observed / 86400 if observed > 0 else 0.0
    if warmup:
        wasted = recorder.lost_measured
    wasted_hours = wasted / 3600
    return {
        "wait": {kind: wait_stats(values) for kind, values in history.waits.items()},
        "sla_attainment": {
            kind: None if share is None else round(share, 6) for kind, share in history.sla.items()
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
        "throttle_held_seconds": round(recorder.sim.kernel.stats.throttle_held_seconds, 3),
        "observed_seconds": round(observed, 3),
        "gpus": recorder.capacity // GPU_MILLI,
    }
