"""deploy/'s alert rules and Grafana dashboard work on the Kubernetes controller too: every
caldera series they read is on the controller's /metrics (caldera.k8s.reporting.metrics) — on
the fake cluster, after a preemption and a throttle, so every family has samples — except the
service's host GPU readings, which dcgm-exporter gives on Kubernetes
(deploy_support.SERVICE_ONLY)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from deploy_support import (
    SERVICE_ONLY,
    Query,
    dashboard_queries,
    exposed_names,
    metric_names,
    outside_names,
    rule_queries,
)
from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from k8s_support import World

from caldera.k8s.reporting.metrics import ControllerMetrics


@pytest.fixture(scope="module")
def controller_metrics() -> str:
    world = World().hypernode("a", "n", count=2).start()
    metrics = ControllerMetrics(world.rt, clock=world.cluster.clock)
    world.rt.observer = metrics.observe_cycle
    metrics.leading.set(1)
    world.submit("small0")
    world.submit("small1")
    world.step()
    world.step(600)
    world.submit(
        "big", type="large-job", tasks=2, gpus=8, topology={"mode": "hard", "highest_tier": 1}
    )
    world.step(1)
    world.run_until("big", "Running", limit=600)
    return generate_latest(metrics.registry).decode()


@pytest.mark.parametrize("query", rule_queries() + dashboard_queries(), ids=lambda q: q.where)
def test_every_series_deploy_reads_is_on_the_controllers_metrics(
    query: Query, controller_metrics: str
) -> None:
    names = metric_names(query.expr)
    missing = names - outside_names(names) - exposed_names(controller_metrics) - SERVICE_ONLY
    assert missing == set(), f"not on the controller's /metrics: {sorted(missing)}"
