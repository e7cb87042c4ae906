"""The controller's `/metrics` (`caldera k8s run --metrics-bind`): the DESIGN §5 names the
service exports, from the controller's own view, and the controller's health.

What the controller knows lives in the cluster (the TrainingJobs' status), so the history
figures — waits, SLA attainment, wasted GPU-hours, the longest large-job wait — are computed at
scrape time from the jobs it holds, one way for every runtime (`caldera.runtime.metrics`), and
a restarted or failed-over controller exports the same. What only a running process can see is
integrated from its cycles: evictions by type and reason, utilisation and gang-hang time since
it started leading. The queue gauges are the service's, from `caldera.runtime.prom`.

Health, for the alerts an operator sets on a controller:

- `caldera_cycle_duration_seconds` (histogram) and `caldera_last_cycle_timestamp_seconds`;
- `caldera_api_requests_total` / `caldera_api_retries_total`: requests sent to the API server
  (watch re-opens and retries included), and how many were retries;
- `caldera_informer_lag_seconds{kind,namespace}`: seconds since an informer last heard from the
  API server (a list, a change, a bookmark, or a watch that ran its time out) — a watch that
  stalled shows as a lag growing past the watch timeout;
- `caldera_leader`: 1 on the replica that holds the Lease, 0 on a standby;
- `caldera_controller_steps_total`.

Every series an alert or the Grafana dashboard reads exists from the first scrape (at zero):
Prometheus cannot alert on a series that does not exist yet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from caldera.core import Decisions, ThrottleOn
from caldera.model import GPU_MILLI, JobState, JobType
from caldera.runtime.metrics import JobHistory, history_metrics
from caldera.runtime.prom import history_families, operator_families, queue_families

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from caldera.k8s.cluster.cache import InformerCache
    from caldera.k8s.runtime import KubeRuntime

__all__ = ["ControllerMetrics", "parse_bind"]

_CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_NOT_ACCOUNTED = ("cancel", "health")  # the user's own cancel, a sick GPU: no preemption


def parse_bind(value: str) -> tuple[str, int]:
    """`HOST:PORT` or `:PORT` (every address) → (host, port); ValueError with a one-line
    reason otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--metrics-bind {value!r}: expected HOST:PORT or :PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class ControllerMetrics:
    """One registry per controller; `observe_cycle` is the runtime's cycle observer.

    Served from the start, before this replica campaigns for the Lease: a standby answers
    too (`caldera_leader` 0, its informers' lag), so the chart's probes on /metrics find it
    ready and Prometheus sees every replica. The runtime's figures come once it leads
    (`attach`)."""

    def __init__(
        self,
        runtime: KubeRuntime | None = None,
        clock: Callable[[], float] = time.time,
        reads: object = None,
    ) -> None:
        self.runtime = runtime
        # What the informers' lag is read from (the runtime's reads unless given).
        self.reads = reads if reads is not None or runtime is None else runtime.reads
        self.clock = clock
        self.registry = CollectorRegistry()
        self.cycle_seconds = Histogram(
            "caldera_cycle_duration_seconds",
            "Wall time of one scheduling cycle (caldera.core.run) in the controller.",
            buckets=_CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.last_cycle = Gauge(
            "caldera_last_cycle_timestamp_seconds",
            "Unix time at which the last scheduling cycle ended.",
            registry=self.registry,
        )
        self.preemptions = Counter(
            "caldera_preemptions",
            "Evictions by victim type, preemptor type and reason.",
            ["victim_type", "preemptor_type", "reason"],
            registry=self.registry,
        )
        self.critical_preempted = Gauge(  # a gauge, as the service exports it
            "caldera_critical_preempted",
            "Critical jobs evicted (must be 0).",
            registry=self.registry,
        )
        self.throttle_episodes = Counter(
            "caldera_throttle_episodes",
            "Times a queue entered waiting mode for a large job.",
            registry=self.registry,
        )
        self.leading = Gauge(
            "caldera_leader",
            "1 on the replica that holds the leader Lease (or runs without election), 0 on a "
            "standby.",
            registry=self.registry,
        )
        self.allocated_area = 0.0  # milli-GPU-seconds allocated, integrated over cycles
        self.hung_area = 0.0  # milli-GPU-seconds held by gangs below min_available
        self.capacity_area = 0.0  # milli-GPU-seconds of capacity over the same time
        self._last_at: float | None = None
        self._lock = threading.Lock()
        self.registry.register(_Collector(self))

    def attach(self, runtime: KubeRuntime) -> None:
        """This replica leads: its runtime's figures join what /metrics serves, and its
        cycles are observed."""
        self.runtime = runtime
        runtime.observer = self.observe_cycle

    def observe_cycle(self, seconds: float, decisions: Decisions, now: float) -> None:
        """One cycle ran for `seconds` (wall time) at `now` and decided `decisions`."""
        self.cycle_seconds.observe(seconds)
        self.last_cycle.set(self.clock())
        assert self.runtime is not None, "cycles run only once a runtime is attached"
        jobs = self.runtime.jobs
        for evict in decisions.evictions:
            if evict.reason.value in _NOT_ACCOUNTED:
                continue
            victim = jobs.get(evict.job)
            preemptor = jobs.get(evict.preemptor) if evict.preemptor else None
            victim_type = victim.spec.type.value if victim else "unknown"
            self.preemptions.labels(
                victim_type,
                preemptor.spec.type.value if preemptor else "none",
                evict.reason.value,
            ).inc()
            if victim_type == JobType.CRITICAL.value:
                self.critical_preempted.inc()
        for change in decisions.throttles:
            if isinstance(change, ThrottleOn):
                self.throttle_episodes.inc()
        self._integrate(now)

    def _integrate(self, now: float) -> None:
        """Utilisation and gang-hang time: what was held since the last cycle, held until now."""
        runtime = self.runtime
        assert runtime is not None
        allocated = hung = 0
        for job in runtime.jobs.values():
            held = sum(t.placement.gpu for t in job.tasks)
            allocated += held
            running = sum(1 for t in job.running)
            if job.state is JobState.RUNNING and 0 < running < job.spec.min_available:
                hung += held
        capacity = runtime.room.capacity_milli
        with self._lock:
            if self._last_at is not None and now > self._last_at:
                span = now - self._last_at
                self.allocated_area += allocated * span
                self.hung_area += hung * span
                self.capacity_area += capacity * span
            self._last_at = now

    def serve(self, bind: str) -> None:
        """Serve `/metrics` on `bind` (HOST:PORT) from a daemon thread (OSError: the address
        cannot be bound)."""
        host, port = parse_bind(bind)
        start_http_server(port, addr=host, registry=self.registry)


class _Collector(Collector):
    """The figures computed at scrape time from what the controller holds."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        runtime = metrics.runtime
        now = metrics.clock()
        if runtime is None:  # a standby: no jobs held, only its informers
            yield from _informer_lag(metrics.reads, now)
            return
        jobs = list(runtime.jobs.values())
        history = history_metrics(
            (
                JobHistory(
                    job.spec.type.value,
                    job.state.value,
                    job.spec.submit,
                    job.first_start,
                    job.end_time,
                    job.evictions,
                    job.lost_gpu_seconds,
                )
                for job in jobs
            ),
            runtime.policy_config.slo,
            now=now,
        )
        yield from history_families(history)
        with metrics._lock:
            allocated, hung, capacity = (
                metrics.allocated_area,
                metrics.hung_area,
                metrics.capacity_area,
            )
        yield GaugeMetricFamily(
            "caldera_gang_hang_gpu_hours",
            "GPU-hours held by gangs running below min_available (since this replica led).",
            value=hung / GPU_MILLI / 3600,
        )
        yield GaugeMetricFamily(
            "caldera_gpu_utilization",
            "Allocated GPU time over GPUs x observed time (since this replica led).",
            value=allocated / capacity if capacity else 0.0,
        )
        yield GaugeMetricFamily(
            "caldera_throttle_held_seconds",
            "Seconds jobs spent Held by a throttle, summed.",
            value=runtime.kernel.stats.throttle_held_seconds,
        )
        yield CounterMetricFamily(
            "caldera_refused_evictions",
            "Evictions of protected or critical jobs the runtime refused (must be 0).",
            value=runtime.kernel.stats.refused_evictions,
        )
        usage = runtime.kernel.decayed_usage
        yield from queue_families(
            runtime.queues,
            jobs,
            runtime.throttles,
            runtime.room.capacity_milli,
            usage.view() if usage is not None else None,
        )
        policy = runtime.policy_config
        yield from operator_families(
            runtime.queues,
            jobs,
            {name: throttle.since for name, throttle in runtime.throttles.items()},
            policy.slo,
            policy.throttle_timeout,
            now,
        )
        yield CounterMetricFamily(
            "caldera_cycles",
            "Scheduling cycles run by this controller.",
            value=runtime.stats.cycles,
        )
        yield CounterMetricFamily(
            "caldera_controller_steps",
            "Controller steps (observe, then a cycle when one is due).",
            value=runtime.stats.steps,
        )
        api = runtime.api
        api = getattr(api, "api", api)  # a DryRunCluster wraps the real client
        yield CounterMetricFamily(
            "caldera_api_requests",
            "Requests sent to the API server (retries and watch re-opens included).",
            value=int(getattr(api, "requests", 0)),
        )
        yield CounterMetricFamily(
            "caldera_api_retries",
            "Requests to the API server that were retries.",
            value=int(getattr(api, "retries", 0)),
        )
        yield from _informer_lag(metrics.reads, now)


def _informer_lag(reads: object, now: float) -> Iterator[Metric]:
    lag = GaugeMetricFamily(
        "caldera_informer_lag_seconds",
        "Seconds since an informer last heard from the API server (list, change, bookmark or "
        "a watch that ran its time out).",
        labels=["kind", "namespace"],
    )
    informers: InformerCache | None = reads if hasattr(reads, "informers") else None  # type: ignore[assignment]
    if informers is not None:
        for informer in informers.informers.values():
            heard = informer.heard_at
            lag.add_metric(
                [informer.kind, informer.namespace or "*"], max(now - heard, 0.0) if heard else 0.0
            )
    yield lag
