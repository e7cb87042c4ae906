"""Gauges for operators' alerts and dashboards (deploy/prometheus, deploy/grafana), beside the
DESIGN §5 metrics of `caldera.service.metrics`.

They describe the live state at scrape time, so an alert can fire while something is going
wrong rather than after it ended: how long each queue's waiting mode has held against the
configured timeout, which jobs have waited past their type's start SLO without starting, and
each queue's guarantee and capability next to its deserved share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from caldera.model import GPU_MILLI, JobState, JobType

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from caldera.service.runtime import Runtime

__all__ = ["OperatorCollector"]

_WAITING = (JobState.PENDING, JobState.HELD)


class OperatorCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        policy = runtime.policy_config
        slo = {kind: policy.slo.get(kind.value) for kind in JobType}
        oldest: dict[tuple[str, str], float] = {}
        late: dict[tuple[str, str], int] = {}
        with runtime.lock:
            now = runtime.clock()
            queues = dict(runtime.queues)
            throttles = dict(runtime.throttles)
            for job in runtime.jobs.values():
                # The SLO is on the first start: a requeued job has met or missed it already.
                if job.state not in _WAITING or job.first_start is not None:
                    continue
                key = (job.spec.queue, job.spec.type.value)
                waited = max(now - job.spec.submit, 0.0)
                oldest[key] = max(oldest.get(key, 0.0), waited)
                limit = slo[job.spec.type]
                if limit is not None and waited > limit:
                    late[key] = late.get(key, 0) + 1

        yield GaugeMetricFamily(
            "caldera_throttle_timeout_seconds",
            "The policy's throttle timeout: a waiting mode should never hold longer.",
            value=policy.throttle_timeout,
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
            throttle = throttles.get(name)
            held.add_metric([name], max(now - throttle.since, 0.0) if throttle else 0.0)
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
        for kind, limit in slo.items():
            if limit is not None:
                targets.add_metric([kind.value], limit)
        for name in sorted(queues):
            for kind, limit in slo.items():
                key = (name, kind.value)
                waiting.add_metric(list(key), oldest.get(key, 0.0))
                if limit is not None:
                    past.add_metric(list(key), late.get(key, 0))
        yield targets
        yield past
        yield waiting
