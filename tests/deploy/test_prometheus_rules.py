"""deploy/prometheus: the rules and the example configuration pass promtool, every alert has
a unit test that fires it and one that keeps it silent, and every caldera metric the rules read
exists on a live `caldera serve`'s /metrics."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from deploy_support import (
    ALERT_TESTS,
    ALERTS,
    CONTROLLER_ONLY,
    PROMETHEUS_CONFIG,
    Query,
    alert_rules,
    exposed_names,
    metric_names,
    outside_names,
    rule_queries,
)


def promtool_run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_pass_promtool_check(promtool: str) -> None:
    done = promtool_run(promtool, "check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def test_example_configuration_passes_promtool_check(promtool: str) -> None:
    done = promtool_run(promtool, "check", "config", str(PROMETHEUS_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_unit_tests_pass(promtool: str) -> None:
    done = promtool_run(promtool, "test", "rules", str(ALERT_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    cases = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    firing = {c["alertname"] for c in cases if c.get("exp_alerts")}
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "alerts no test fires"
    assert names - silent == set(), "alerts no test keeps silent"
    assert (firing | silent) - names == set(), "tests of alerts that do not exist"


def test_the_issue_s_alerts_are_all_there() -> None:
    names = {rule["alert"] for rule in alert_rules()}
    wanted = {
        "CalderaCriticalJobPastSLO",  # a critical job waiting longer than its SLO
        "CalderaCriticalJobPreempted",
        "CalderaGangHang",
        "CalderaThrottleOverdue",  # a throttle held past its timeout
        "CalderaWasteRateHigh",  # above the seeds' 0.4 GPU-h/day
        "CalderaCycleSlow",  # cycle p99 above 1 s
        "CalderaNotCycling",
        # seed 004's DCGM alerts
        "GPUUtilizationLow",
        "GPUMemoryUsageHigh",
        "GPUTemperatureHigh",
        "GPUDeviceErrors",
        "GPUNotAvailable",
    }
    assert wanted <= names


@pytest.mark.parametrize("query", rule_queries(), ids=lambda q: q.where)
def test_rule_metrics_exist_on_live_metrics(query: Query, live_metrics: str) -> None:
    names = metric_names(query.expr)
    assert names, f"no metric name read from {query.expr!r}"
    missing = names - outside_names(names) - exposed_names(live_metrics) - CONTROLLER_ONLY
    assert missing == set(), f"not on caldera's /metrics: {sorted(missing)}"
