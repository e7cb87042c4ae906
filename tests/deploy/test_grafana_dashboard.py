"""deploy/grafana/caldera.json: a well-formed dashboard (ids, grid, datasource variable,
targets), every query valid PromQL (promtool), every caldera metric it reads present on a
live /metrics, and the panels the issue asks for."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import (
    DASHBOARD,
    Query,
    dashboard,
    dashboard_queries,
    exposed_names,
    metric_names,
    outside_names,
    panels,
)

PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "piechart", "state-timeline"}
BOARD = dashboard()


def content_panels() -> list[dict[str, Any]]:
    return [p for p in panels(BOARD) if p["type"] != "row"]


def test_dashboard_identity() -> None:
    assert BOARD["uid"] == "caldera-overview"
    assert BOARD["title"] == "caldera"
    assert BOARD["schemaVersion"] >= 36
    assert BOARD["id"] is None  # importable into any Grafana
    variables = {v["name"]: v for v in BOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["queue"]["datasource"]["uid"] == "${datasource}"


def test_panels_are_well_formed() -> None:
    ids = [p["id"] for p in panels(BOARD)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels(BOARD):
        assert panel["type"] in PANEL_TYPES, panel["title"]
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']} is wider than the grid"
    for panel in content_panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel.get("description"), f"{panel['title']} says nothing about itself"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]


def test_panels_do_not_overlap() -> None:
    def cells(panel: dict[str, Any]) -> set[tuple[int, int]]:
        g = panel["gridPos"]
        return {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }

    for a, b in itertools.combinations(panels(BOARD), 2):
        assert not cells(a) & cells(b), f"{a['title']!r} overlaps {b['title']!r}"


def test_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Every query as a recording rule: `promtool check rules` parses each expression."""
    queries = dashboard_queries(BOARD)
    rules = [{"record": f"dashboard:q{i}", "expr": q.expr} for i, q in enumerate(queries)]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(queries)} rules found" in done.stdout


@pytest.mark.parametrize("query", dashboard_queries(BOARD), ids=lambda q: q.where)
def test_dashboard_metrics_exist_on_live_metrics(query: Query, live_metrics: str) -> None:
    names = metric_names(query.expr)
    assert names, f"no metric name read from {query.expr!r}"
    missing = names - outside_names(names) - exposed_names(live_metrics)
    assert missing == set(), f"not on caldera's /metrics: {sorted(missing)}"


WANTED = [
    # (what the issue asks for, a metric a panel must read, a fragment its query must have)
    ("queue shares vs deserved", "caldera_queue_allocated_gpus", ""),
    ("queue shares vs deserved", "caldera_queue_deserved_gpus", ""),
    ("pending by queue and type", "caldera_queue_pending_jobs", "by (queue, type)"),
    ("wait p95 by type", "caldera_wait_seconds", 'stat="p95"'),
    ("preemptions by reason", "caldera_preemptions_total", "by (reason)"),
    ("GPU-hours wasted", "caldera_wasted_gpu_hours", ""),
    ("gang hang", "caldera_gang_hang_gpu_hours", ""),
    ("throttle", "caldera_queue_throttled", ""),
    ("cycle duration", "caldera_cycle_duration_seconds_bucket", "histogram_quantile"),
    ("critical SLA attainment", "caldera_sla_attainment", ""),
    ("seed 004 GPU utilization", "DCGM_FI_DEV_GPU_UTIL", ""),
    ("seed 004 GPU memory", "DCGM_FI_DEV_FB_USED", ""),
    ("seed 004 GPU temperature", "DCGM_FI_DEV_GPU_TEMP", ""),
]


@pytest.mark.parametrize(
    ("what", "metric", "fragment"), WANTED, ids=[w[0] + " " + w[1] for w in WANTED]
)
def test_dashboard_shows(what: str, metric: str, fragment: str) -> None:
    assert any(
        metric in metric_names(q.expr) and fragment in q.expr for q in dashboard_queries(BOARD)
    ), f"no panel for {what} ({metric} {fragment})"


def test_dashboard_file_is_formatted_json() -> None:
    """Kept as written by `json.dump(indent=2)`: diffs of the dashboard stay readable."""
    import json

    assert DASHBOARD.read_text() == json.dumps(BOARD, indent=2, ensure_ascii=False) + "\n"
