"""Prometheus metric families every runtime's `/metrics` exports under the same names.

The service (`caldera.service.metrics`) and the Kubernetes controller
(`caldera.k8s.reporting.metrics`) each hold their jobs differently; what they export from them
is built here once:

- `history_families`: the DESIGN §5 history figures (waits, SLA attainment, wasted GPU-hours,
  the longest large-job wait), from `caldera.runtime.metrics.history_metrics`;
- `queue_families`: per queue, GPUs allocated and deserved, jobs pending by type, waiting mode;
  live jobs by state; the allocation rate;
- `operator_families`: what operators' alerts read while something goes wrong (waiting modes
  against their timeout, jobs past their start SLO, guarantees and capabilities).

Every series a dashboard or alert reads is exported from the first scrape, at zero when
nothing has happened yet (`caldera_large_job_max_wait` is 0 until a large job waits).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

from caldera.metrics_util import percentile
from caldera.model import GPU_MILLI, JobState, JobType, Queue, deserved_shares
from caldera.runtime.job import TrackedJob
from caldera.runtime.metrics import HistoryMetrics

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["history_families", "operator_families", "queue_families"]


def history_families(history: HistoryMetrics) -> Iterator[Metric]:
    """Waits, SLA attainment, wasted GPU-hours and the longest large-job wait."""
    wait = GaugeMetricFamily(
        "caldera_wait_seconds",
        "First start minus submit, by job type (quantile or mean/max).",
        labels=["type", "stat"],
    )
    count = GaugeMetricFamily(
        "caldera_wait_count", "Jobs that have started, by type.", labels=["type"]
    )
    for kind, values in history.waits.items():
        count.add_metric([kind], len(values))
        if not values:
            continue
        wait.add_metric([kind, "mean"], sum(values) / len(values))
        for q in (0.5, 0.95, 0.99):
            wait.add_metric([kind, f"p{round(q * 100)}"], percentile(values, q))
        wait.add_metric([kind, "max"], values[-1])
    yield wait
    yield count
    sla = GaugeMetricFamily(
        "caldera_sla_attainment",
        "Share of jobs that started within the type's start SLO and were never preempted.",
        labels=["type"],
    )
    for kind in JobType:
        share = history.sla.get(kind.value)
        if share is not None:
            sla.add_metric([kind.value], share)
    yield sla
    yield GaugeMetricFamily(
        "caldera_wasted_gpu_hours",
        "GPU-hours of work lost to evictions.",
        value=history.wasted_gpu_seconds / 3600,
    )
    yield GaugeMetricFamily(
        "caldera_large_job_max_wait",
        "Longest wait of a large job, seconds (a waiting one counts up to now; 0 before any).",
        value=history.large_job_max_wait or 0.0,
    )


def queue_families(
    queues: Mapping[str, Queue],
    jobs: Iterable[TrackedJob],  # type: ignore[type-arg]
    throttles: Iterable[str],
    capacity_milli: int,
    decayed: Mapping[str, float] | None = None,
) -> Iterator[Metric]:
    """Per queue: allocated and deserved GPUs, pending jobs by type, waiting mode; live jobs
    by state; the allocation rate. `throttles`: the queues in waiting mode. `decayed`: each
    queue's decayed usage in milli-GPU-seconds, with fair share over time on (None: off)."""
    allocated: dict[str, int] = {}
    pending: dict[tuple[str, str], int] = {}
    states: dict[str, int] = {}
    demand = 0
    for job in jobs:
        states[job.state.value] = states.get(job.state.value, 0) + 1
        held = sum(t.placement.gpu for t in job.tasks)
        if held:
            allocated[job.spec.queue] = allocated.get(job.spec.queue, 0) + held
        if job.state in (JobState.PENDING, JobState.HELD):
            key = (job.spec.queue, job.spec.type.value)
            pending[key] = pending.get(key, 0) + 1
            demand += job.spec.gang_request.gpu
    throttled_queues = set(throttles)
    shares = deserved_shares(queues, capacity_milli)
    alloc = GaugeMetricFamily(
        "caldera_queue_allocated_gpus",
        "GPUs held by the queue's running and releasing tasks (a department: its teams').",
        labels=["queue"],
    )
    deserved = GaugeMetricFamily(
        "caldera_queue_deserved_gpus",
        "The queue's deserved GPUs (set, or its parent's share split by weight).",
        labels=["queue"],
    )
    waiting = GaugeMetricFamily(
        "caldera_queue_pending_jobs",
        "Pending or Held jobs by queue and job type.",
        labels=["queue", "type"],
    )
    throttled = GaugeMetricFamily(
        "caldera_queue_throttled",
        "1 while the queue is in waiting mode for a large job.",
        labels=["queue"],
    )
    held_below: dict[str, int] = {}  # a department holds what its teams hold
    for name, queue in queues.items():
        if queue.parent is not None:
            held_below[queue.parent] = held_below.get(queue.parent, 0) + allocated.get(name, 0)
    for name in sorted(queues):
        held = allocated.get(name, 0) + held_below.get(name, 0)
        alloc.add_metric([name], held / GPU_MILLI)
        deserved.add_metric([name], shares[name].gpu / GPU_MILLI)
        throttled.add_metric([name], 1.0 if name in throttled_queues else 0.0)
        for kind in JobType:
            waiting.add_metric([name, kind.value], pending.get((name, kind.value), 0))
    yield alloc
    yield deserved
    yield waiting
    yield throttled
    if decayed is not None:
        usage = GaugeMetricFamily(
            "caldera_queue_decayed_gpu_hours",
            "The queue's GPU usage with exponential decay (policy.fair_share.half_life): what "
            "orders the lending of idle room beyond deserved shares.",
            labels=["queue"],
        )
        for name in sorted(queues):
            usage.add_metric([name], decayed.get(name, 0.0) / GPU_MILLI / 3600)
        yield usage
    live = GaugeMetricFamily("caldera_jobs", "Live jobs by state.", labels=["state"])
    for state in (JobState.HELD, JobState.PENDING, JobState.RUNNING, JobState.RELEASING):
        live.add_metric([state.value], states.get(state.value, 0))
    yield live
    used = sum(allocated.values())
    possible = min(capacity_milli, used + demand)
    yield GaugeMetricFamily(
        "caldera_gpu_allocation_rate",
        "Allocated GPUs over what could be allocated now (capacity or demand).",
        value=min(used / possible, 1.0) if possible else 0.0,
    )


def operator_families(
    queues: Mapping[str, Queue],
    jobs: Iterable[TrackedJob],  # type: ignore[type-arg]
    throttle_since: Mapping[str, float],
    slo: Mapping[str, float | None],
    throttle_timeout: float,
    now: float,
) -> Iterator[Metric]:
    """Gauges for operators' alerts and dashboards (deploy/prometheus, deploy/grafana): the
    live state at scrape time, so an alert fires while something goes wrong rather than after
    it ended — how long each queue's waiting mode has held against the timeout, which jobs have
    waited past their type's start SLO without starting, each queue's guarantee and capability
    next to its deserved share. `throttle_since`: queue → when its waiting mode began."""
    limits = {kind: slo.get(kind.value) for kind in JobType}
    oldest: dict[tuple[str, str], float] = {}
    late: dict[tuple[str, str], int] = {}
    for job in jobs:
        # The SLO is on the first start: a requeued job has met or missed it already.
        if job.state not in (JobState.PENDING, JobState.HELD) or job.first_start is not None:
            continue
        key = (job.spec.queue, job.spec.type.value)
        waited = max(now - job.spec.submit, 0.0)
        oldest[key] = max(oldest.get(key, 0.0), waited)
        limit = limits[job.spec.type]
        if limit is not None and waited > limit:
            late[key] = late.get(key, 0) + 1
    yield GaugeMetricFamily(
        "caldera_throttle_timeout_seconds",
        "The policy's throttle timeout: a waiting mode should never hold longer.",
        value=throttle_timeout,
    )
    held = GaugeMetricFamily(
        "caldera_queue_throttle_seconds",
        "Seconds the queue's current waiting mode has held (0 when not throttled).",
        labels=["queue"],
    )
    guarantee = GaugeMetricFamily(
        "caldera_queue_guarantee_gpus",
        "GPUs never reclaimed from the queue (queues that set a guarantee).",
        labels=["queue"],
    )
    capability = GaugeMetricFamily(
        "caldera_queue_capability_gpus",
        "The queue's hard cap in GPUs (queues that set a capability).",
        labels=["queue"],
    )
    for name, queue in sorted(queues.items()):
        since = throttle_since.get(name)
        held.add_metric([name], max(now - since, 0.0) if since is not None else 0.0)
        if queue.guarantee is not None and queue.guarantee.gpu > 0:
            guarantee.add_metric([name], queue.guarantee.gpu / GPU_MILLI)
        if queue.capability is not None and queue.capability.gpu > 0:
            capability.add_metric([name], queue.capability.gpu / GPU_MILLI)
    yield held
    yield guarantee
    yield capability
    targets = GaugeMetricFamily(
        "caldera_slo_seconds",
        "Start SLO per job type (first start - submit), for types that have one.",
        labels=["type"],
    )
    past = GaugeMetricFamily(
        "caldera_waiting_past_slo_jobs",
        "Jobs never started, Pending or Held, waiting longer than their type's start SLO.",
        labels=["queue", "type"],
    )
    waiting = GaugeMetricFamily(
        "caldera_queue_oldest_wait_seconds",
        "Wait so far of the oldest never-started Pending or Held job (0 when none).",
        labels=["queue", "type"],
    )
    for kind, limit in limits.items():
        if limit is not None:
            targets.add_metric([kind.value], limit)
    for name in sorted(queues):
        for kind, limit in limits.items():
            key = (name, kind.value)
            waiting.add_metric(list(key), oldest.get(key, 0.0))
            if limit is not None:
                past.add_metric(list(key), late.get(key, 0))
    yield targets
    yield past
    yield waiting
