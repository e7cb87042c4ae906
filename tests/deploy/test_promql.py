"""The metric-name reader the deploy tests rely on: if it missed names, the checks that every
name exists on a live /metrics would pass vacuously."""

from __future__ import annotations

import pytest
from deploy_support import grafana_substituted, metric_names

CASES = [
    ("plain", "caldera_gang_hang_gpu_hours > 0", {"caldera_gang_hang_gpu_hours"}),
    (
        "matchers and strings",
        'caldera_wait_seconds{stat="p95", type=~"a|b"}',
        {"caldera_wait_seconds"},
    ),
    (
        "function, range and grouping",
        "sum by (queue, type) (increase(caldera_preemptions_total[1h]))",
        {"caldera_preemptions_total"},
    ),
    (
        "histogram quantile with le",
        "histogram_quantile(0.99, sum by (job, instance, le) "
        "(rate(caldera_cycle_duration_seconds_bucket[5m]))) > 1",
        {"caldera_cycle_duration_seconds_bucket"},
    ),
    (
        "vector matching keywords",
        "a_seconds > on (job, instance) group_left () b_seconds",
        {"a_seconds", "b_seconds"},
    ),
    ("set operators", 'x > 0 and x < 10 or absent(up{job="c"}) unless y', {"x", "up", "y"}),
    (
        "time() is a function",
        "time() - caldera_last_cycle_timestamp_seconds > 60",
        {"caldera_last_cycle_timestamp_seconds"},
    ),
    ("numbers and durations", "delta(w[1d]) > 0.4 + 1e3 offset 5m", {"w"}),
    (
        "subquery",
        "max_over_time((count by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP))[1h:1m])",
        {"DCGM_FI_DEV_GPU_TEMP"},
    ),
    ("colons in recording names", "job:caldera_x:rate5m * 2", {"job:caldera_x:rate5m"}),
]


@pytest.mark.parametrize(("expr", "want"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_metric_names(expr: str, want: set[str]) -> None:
    assert metric_names(expr) == want


def test_grafana_variables_are_substituted() -> None:
    expr = 'rate(x{queue=~"$queue"}[$__rate_interval])'
    assert grafana_substituted(expr) == 'rate(x{queue=~".*"}[1m])'
