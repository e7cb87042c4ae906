"""Gauges for operators' alerts and dashboards (deploy/prometheus, deploy/grafana), beside the
DESIGN §5 metrics of `caldera.service.metrics`: the service's jobs, read under its lock, through
`caldera.runtime.prom.operator_families` (the Kubernetes controller exports the same).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.registry import Collector

from caldera.runtime.prom import operator_families

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from caldera.service.runtime import Runtime

__all__ = ["OperatorCollector"]


class OperatorCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        policy = runtime.policy_config
        with runtime.lock:  # the jobs move under the runtime's lock: read them inside it
            families = list(
                operator_families(
                    runtime.queues,
                    runtime.jobs.values(),
                    {name: throttle.since for name, throttle in runtime.throttles.items()},
                    policy.slo,
                    policy.throttle_timeout,
                    runtime.clock(),
                )
            )
        yield from families
