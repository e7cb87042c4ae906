"""The controller's /metrics (caldera.k8s.reporting.metrics) on the fake cluster: the DESIGN
§5 names the service exports, from the controller's view, its health series, and every name
the deploy/ rules and dashboard read that is not the service's own GPU readings."""

from __future__ import annotations

import urllib.request

import pytest
from k8s_support import NAMESPACE, World
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from caldera.k8s.reporting.metrics import ControllerMetrics, parse_bind


def scrape(metrics: ControllerMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name → {sorted labels → value}, as Prometheus reads the text."""
    text = generate_latest(metrics.registry).decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def watched(world: World) -> ControllerMetrics:
    metrics = ControllerMetrics(world.rt, clock=world.cluster.clock)
    world.rt.observer = metrics.observe_cycle
    return metrics


def test_a_fresh_controller_exports_every_alerted_series_at_zero() -> None:
    world = World().hypernode("a", "n", count=2).start()
    seen = scrape(watched(world))
    for name in (
        "caldera_large_job_max_wait",
        "caldera_wasted_gpu_hours",
        "caldera_critical_preempted",
        "caldera_refused_evictions_total",
        "caldera_gang_hang_gpu_hours",
        "caldera_throttle_episodes_total",
        "caldera_throttle_held_seconds",
    ):
        assert seen[name] == {(): 0.0}, name
    assert seen["caldera_throttle_timeout_seconds"] == {(): 300.0}
    assert seen["caldera_api_requests_total"][()] > 0  # the fake counts what it was sent
    assert seen["caldera_waiting_past_slo_jobs"][(("queue", "team"), ("type", "critical"))] == 0
    assert seen["caldera_queue_deserved_gpus"] == {(("queue", "team"),): 16.0}
    assert seen["caldera_queue_allocated_gpus"] == {(("queue", "team"),): 0.0}


def test_a_preemption_is_counted_by_type_and_reason_and_the_wait_shows() -> None:
    world = World().hypernode("a", "n", count=2).start()
    metrics = watched(world)
    world.submit("small0")
    world.submit("small1")
    world.step()
    world.step(600)
    seen = scrape(metrics)
    assert seen["caldera_queue_allocated_gpus"] == {(("queue", "team"),): 16.0}
    assert seen["caldera_wait_count"][(("type", "normal"),)] == 2
    world.submit(
        "big", type="large-job", tasks=2, gpus=8, topology={"mode": "hard", "highest_tier": 1}
    )
    world.step(1)
    seen = scrape(metrics)
    key = (("preemptor_type", "large-job"), ("reason", "preempt"), ("victim_type", "normal"))
    assert seen["caldera_preemptions_total"] == {key: 2.0}
    assert seen["caldera_throttle_episodes_total"] == {(): 1.0}
    assert seen["caldera_queue_throttled"] == {(("queue", "team"),): 1.0}
    assert seen["caldera_queue_pending_jobs"][(("queue", "team"), ("type", "large-job"))] == 1
    assert seen["caldera_large_job_max_wait"][()] >= 0.0
    assert seen["caldera_cycle_duration_seconds_count"][()] >= 3
    world.run_until("big", "Running", limit=600)
    seen = scrape(metrics)
    assert seen["caldera_wait_count"][(("type", "large-job"),)] == 1
    # Two 8-GPU nodes held the whole time since the first cycle: utilisation near 1.
    assert 0.9 <= seen["caldera_gpu_utilization"][()] <= 1.0
    assert seen["caldera_critical_preempted"] == {(): 0.0}
    assert world.state("big", NAMESPACE) == "Running"


def test_metrics_are_served_over_http(unused_port: int) -> None:
    world = World().hypernode("a", "n", count=1).start()
    metrics = watched(world)
    metrics.serve(f"127.0.0.1:{unused_port}")
    with urllib.request.urlopen(f"http://127.0.0.1:{unused_port}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    assert "caldera_leader" in body and "caldera_queue_deserved_gpus" in body


def test_a_standby_serves_its_leader_gauge_before_it_leads_then_the_runtime_joins(
    unused_port: int,
) -> None:
    """A replica serves /metrics from the start (the chart's probes read it): a standby
    shows caldera_leader 0 and none of the figures of jobs it does not hold; once it leads
    (`attach`) they appear. Before, a standby bound nothing until it led: never Ready, killed
    by its liveness probe, and a standby taking over from a leader on the same host crashed
    binding the port the old one still held."""
    leading = [False]
    metrics = ControllerMetrics()
    metrics.leading.set_function(lambda: 1.0 if leading[0] else 0.0)
    metrics.serve(f"127.0.0.1:{unused_port}")
    with urllib.request.urlopen(f"http://127.0.0.1:{unused_port}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    assert "caldera_leader 0.0" in body
    assert "caldera_queue_deserved_gpus" not in body
    standby = scrape(metrics)
    assert standby["caldera_cycle_duration_seconds_count"] == {(): 0.0}

    world = World().hypernode("a", "n", count=1).start()
    leading[0] = True
    metrics.attach(world.rt)
    world.submit("small0")
    world.step()
    seen = scrape(metrics)
    assert seen["caldera_leader"] == {(): 1.0}
    assert seen["caldera_queue_deserved_gpus"] == {(("queue", "team"),): 8.0}
    assert seen["caldera_cycle_duration_seconds_count"][()] >= 1


@pytest.mark.parametrize(
    ("value", "want"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9", ("127.0.0.1", 9)), ("[::1]:80", ("::1", 80))],
)
def test_bind_addresses(value: str, want: tuple[str, int]) -> None:
    assert parse_bind(value) == want


@pytest.mark.parametrize("value", ["8080", "host:", "host:http", ":70000", ":0"])
def test_bad_bind_addresses_are_one_line_errors(value: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_bind(value)


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_decayed_usage_is_exported_with_fair_share_over_time_on() -> None:
    """Issue 39: each queue's decayed usage (policy.fair_share.half_life) on /metrics; none
    without it."""
    off = World().hypernode("a", "n", count=1).start()
    assert "caldera_queue_decayed_gpu_hours" not in scrape(watched(off))
    world = World(policy={"fair_share": {"half_life": 3600}}).hypernode("a", "n", count=1).start()
    metrics = watched(world)
    world.submit("small0")
    world.step()
    world.step(3600)
    world.step(1)
    seen = scrape(metrics)["caldera_queue_decayed_gpu_hours"][(("queue", "team"),)]
    # 8 GPUs for an hour with a one-hour half-life: 8 x 1/ln 2 x (1 - 1/2) = 5.77 GPU-hours
    assert 5.5 < seen < 5.8
