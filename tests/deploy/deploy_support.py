"""What the deploy tests share: Prometheus' tools, and what they read out of the rules and the
Grafana dashboard (each PromQL expression, the metric names it uses, and the names a live
`/metrics` exposes)."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "caldera.json"
ALERT_TESTS = Path(__file__).with_name("alerts_test.yaml")

# dcgm-exporter's default counters the rules and panels use (NVIDIA/dcgm-exporter
# etc/default-counters.csv), plus DCGM_FI_DEV_COUNT, the field seed 004's GPUNotAvailable
# reads (a DCGM field an operator may add to the exporter's counters file).
DCGM_NAMES = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_COUNT",
    }
)
# caldera's own GPU readings through NVML: declared on every /metrics, with samples only on
# real (or fake-NVML) GPUs, never on `--gpus N` virtual ones.
NVML_NAMES = frozenset({"caldera_gpu_temperature_celsius", "caldera_gpu_xid_errors_total"})
# Series only one of caldera's runtimes exports. The Kubernetes controller's health (leader,
# informers, API requests) has no meaning in the service; the service's host GPU readings
# (NVML, drains) have none in the controller, where dcgm-exporter reports the GPUs.
CONTROLLER_ONLY = frozenset(
    {
        "caldera_leader",
        "caldera_informer_lag_seconds",
        "caldera_api_requests_total",
        "caldera_api_retries_total",
        "caldera_controller_steps_total",
    }
)
SERVICE_ONLY = frozenset(
    {
        "caldera_gpus",
        "caldera_gpus_available",
        "caldera_gpus_lost",
        "caldera_gpu_drained",
        "caldera_gpu_temperature_celsius",
        "caldera_gpu_xid_errors_total",
    }
)
# Prometheus' own series: `up` is written by the scrape, not by caldera.
PROMETHEUS_NAMES = frozenset({"up"})

# Grafana's variables as a query sees them once Grafana has substituted them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$queue": ".*"}

_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"offset", "bool", "atan2", "inf", "nan"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")


def prometheus_tool(name: str) -> str:
    """The path of `promtool` or `prometheus`; skip off-CI where it is not installed."""
    path = shutil.which(name)
    if path is not None:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} is missing under CI: scripts/system-deps.sh installs `prometheus`")
    pytest.skip(f"{name} not installed (Debian package prometheus: make system-deps as root)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, keywords or labels)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)  # by/without/on/ignoring/group_x and their label lists
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group(0)
        if word.lower() in _KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue  # a keyword, or a function call
        names.add(word)
    return names


def grafana_substituted(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


@dataclass(frozen=True)
class Query:
    where: str  # "alert CalderaGangHang" or "panel 7 'Gang hang' A"
    expr: str


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rule_queries() -> list[Query]:
    return [Query(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' collapsed children included."""
    found: list[dict[str, Any]] = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_queries(board: dict[str, Any] | None = None) -> list[Query]:
    """Each panel target's expression, with Grafana's variables substituted."""
    board = board if board is not None else dashboard()
    return [
        Query(f"panel {p['id']} {p['title']!r} {t['refId']}", grafana_substituted(t["expr"]))
        for p in panels(board)
        for t in p.get("targets", [])
    ]


def exposed_names(text: str) -> set[str]:
    """Every series name a Prometheus text exposition declares or carries."""
    names: set[str] = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def outside_names(names: set[str]) -> set[str]:
    """The names that caldera does not export but another exporter does."""
    return {n for n in names if n in DCGM_NAMES or n in PROMETHEUS_NAMES}
