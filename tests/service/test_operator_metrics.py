"""The gauges behind the operator's alerts and dashboard (caldera.service.operator_metrics),
read from a runtime whose jobs and throttles are set by the test: no cycle, no processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from caldera.core import Throttle
from caldera.service.config import parse_config
from caldera.service.gpus import local_node
from caldera.service.metrics import ServiceMetrics
from caldera.service.operator_metrics import OperatorCollector
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for

CONFIG = {
    "queues": [
        {"name": "team-a", "guarantee": {"gpu": 2}, "capability": {"gpu": 6}},
        {"name": "ops", "deserved": {"gpu": 4}},
    ],
    "tokens": [{"token": "ops-token-0001", "user": "ops", "critical": True, "admin": True}],
    "policy": {"throttle_timeout": 100, "slo": {"critical": 60, "normal": 300}},
}
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Runtime, Clock, CollectorRegistry]]:
    store = Store(database_url_for(tmp_path))
    store.migrate()
    clock = Clock()
    node, _ = local_node(8)
    runtime = Runtime(parse_config(CONFIG), store, tmp_path, (node,), clock=clock)
    registry = CollectorRegistry()
    registry.register(OperatorCollector(runtime))
    yield runtime, clock, registry
    store.close()


def submit(runtime: Runtime, queue: str, kind: str) -> str:
    request: dict[str, Any] = {
        "name": "job",
        "queue": queue,
        "type": kind,
        "tasks": 1,
        "gpu": 1000,
        "min_available": 1,
        "command": ["true"],
        "checkpoint": {"interval": None, "cost": 0.0, "on_sigterm": True},
    }
    return str(runtime.submit(request, "ops")["id"])


def test_jobs_past_their_slo_and_the_oldest_wait(world: Any) -> None:
    runtime, clock, registry = world
    submit(runtime, "team-a", "critical")
    submit(runtime, "team-a", "normal")
    requeued = submit(runtime, "team-a", "critical")
    runtime.jobs[requeued].first_start = T0 + 1  # started once: its SLO is behind it
    submit(runtime, "ops", "debug")
    clock.now = T0 + 100

    def value(name: str, queue: str, kind: str) -> float | None:
        return registry.get_sample_value(name, {"queue": queue, "type": kind})

    past = "caldera_waiting_past_slo_jobs"
    assert value(past, "team-a", "critical") == 1  # 100 s > 60 s, the requeued one not counted
    assert value(past, "team-a", "normal") == 0  # 100 s < 300 s
    assert value(past, "ops", "critical") == 0
    assert value(past, "ops", "debug") is None  # debug has no SLO
    oldest = "caldera_queue_oldest_wait_seconds"
    assert value(oldest, "team-a", "critical") == 100
    assert value(oldest, "ops", "debug") == 100
    assert value(oldest, "ops", "normal") == 0
    assert registry.get_sample_value("caldera_slo_seconds", {"type": "critical"}) == 60
    assert registry.get_sample_value("caldera_slo_seconds", {"type": "debug"}) is None


def test_throttle_age_against_the_timeout(world: Any) -> None:
    runtime, clock, registry = world
    runtime.throttles["team-a"] = Throttle("team-a", "j-large", T0 + 40)
    clock.now = T0 + 250
    held = "caldera_queue_throttle_seconds"
    assert registry.get_sample_value(held, {"queue": "team-a"}) == 210
    assert registry.get_sample_value(held, {"queue": "ops"}) == 0
    assert registry.get_sample_value("caldera_throttle_timeout_seconds") == 100


def test_guarantee_and_capability_only_where_set(world: Any) -> None:
    _, _, registry = world
    assert registry.get_sample_value("caldera_queue_guarantee_gpus", {"queue": "team-a"}) == 2
    assert registry.get_sample_value("caldera_queue_capability_gpus", {"queue": "team-a"}) == 6
    assert registry.get_sample_value("caldera_queue_guarantee_gpus", {"queue": "ops"}) is None
    assert registry.get_sample_value("caldera_queue_capability_gpus", {"queue": "ops"}) is None


def test_last_cycle_timestamp_is_wall_clock() -> None:
    metrics = ServiceMetrics()
    assert metrics.registry.get_sample_value("caldera_last_cycle_timestamp_seconds") == 0
    before = time.time()
    metrics.observe_cycle(0.002)
    stamp = metrics.registry.get_sample_value("caldera_last_cycle_timestamp_seconds")
    assert stamp is not None and before <= stamp <= time.time()
    assert metrics.registry.get_sample_value("caldera_cycle_duration_seconds_count") == 1
