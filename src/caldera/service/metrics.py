"""`/metrics`: the DESIGN §5 metrics with a `caldera_` prefix, queue gauges, throttle state and
the cycle latency, in Prometheus text format (prometheus-client).

History metrics (waits, SLA attainment, wasted GPU-hours, preemptions, throttle episodes) are
computed from the database at scrape time, so they survive restarts; utilisation and gang-hang
time are integrated by the runtime since this server started.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from caldera.model import GPU_MILLI, JobType
from caldera.runtime.metrics import JobHistory, history_metrics
from caldera.runtime.prom import history_families, queue_families
from caldera.service.operator_metrics import OperatorCollector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from caldera.service.runtime import Runtime

__all__ = ["CONTENT_TYPE", "ServiceMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServiceMetrics:
    """One registry per server (tests run several in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.cycle_seconds = Histogram(
            "caldera_cycle_duration_seconds",
            "Wall time of one scheduling cycle (caldera.core.run).",
            buckets=_CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.last_cycle = Gauge(
            "caldera_last_cycle_timestamp_seconds",
            "Unix time (wall clock) at which the last scheduling cycle ended.",
            registry=self.registry,
        )
        self._runtime: Runtime | None = None

    def attach(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self.registry.register(_StateCollector(runtime))
        self.registry.register(OperatorCollector(runtime))

    def observe_cycle(self, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)
        self.last_cycle.set_to_current_time()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        store = runtime.store
        # One computation for every runtime (caldera.runtime.metrics), fed from the database.
        history = history_metrics(
            (
                JobHistory(
                    row["type"],
                    row["state"],
                    row["submit_time"],
                    row["first_start"],
                    row["end_time"],
                    row["evictions"] or 0,
                    row["lost_gpu_seconds"] or 0.0,
                )
                for row in store.history()
            ),
            runtime.policy_config.slo,
            now=runtime.clock(),
        )
        yield from history_families(history)

        preemptions = CounterMetricFamily(
            "caldera_preemptions",
            "Evictions by victim type, preemptor type and reason.",
            labels=["victim_type", "preemptor_type", "reason"],
        )
        tally: dict[tuple[str, str, str], int] = {}
        critical_preempted = 0
        for event in store.events_of_kind("evict"):
            data = event["data"] or {}
            if data.get("reason") in ("cancel", "health"):
                continue  # the user's own cancel, or a sick GPU (docs/gpus.md): no preemption
            key = (
                str(data.get("victim_type")),
                str(data.get("preemptor_type") or "none"),
                str(data.get("reason")),
            )
            tally[key] = tally.get(key, 0) + 1
            if data.get("victim_type") == JobType.CRITICAL.value:
                critical_preempted += 1
        for key, value in sorted(tally.items()):
            preemptions.add_metric(list(key), value)
        yield preemptions
        yield GaugeMetricFamily(
            "caldera_critical_preempted",
            "Critical jobs evicted (must be 0).",
            value=critical_preempted,
        )

        stats = runtime.stats
        capacity = runtime.room.capacity_milli / GPU_MILLI  # MIG slices by GPU-equivalent
        yield GaugeMetricFamily(
            "caldera_gang_hang_gpu_hours",
            "GPU-hours held by gangs running below min_available (since this server started).",
            value=stats.hung_area / GPU_MILLI / 3600,
        )
        observed = stats.observed
        yield GaugeMetricFamily(
            "caldera_gpu_utilization",
            "Allocated GPU time over GPUs x observed time (since this server started).",
            value=stats.allocated_area / GPU_MILLI / (capacity * observed)
            if capacity and observed
            else 0.0,
        )
        yield CounterMetricFamily(
            "caldera_throttle_episodes",
            "Times a queue entered waiting mode for a large job.",
            value=store.count_events("throttle_on"),
        )
        yield GaugeMetricFamily(
            "caldera_throttle_held_seconds",
            "Seconds jobs spent Held by a throttle, summed.",
            value=stats.throttle_held_seconds,
        )
        yield CounterMetricFamily(
            "caldera_refused_evictions",
            "Evictions of protected or critical jobs the runtime refused (must be 0).",
            value=stats.refused_evictions,
        )
        yield from self._queues(capacity)

    def _queues(self, capacity: float) -> Iterator[Metric]:
        runtime = self.runtime
        with runtime.lock:  # the jobs move under the runtime's lock: read them inside it
            families = list(
                queue_families(
                    runtime.queues,
                    runtime.jobs.values(),
                    runtime.throttles,
                    round(capacity * GPU_MILLI),
                    usage.view() if (usage := runtime.kernel.decayed_usage) is not None else None,
                )
            )
        yield from families
        yield CounterMetricFamily(
            "caldera_cycles", "Scheduling cycles run by this server.", value=runtime.stats.cycles
        )
