"""A real Prometheus (the Debian package's server) scrapes a live `caldera serve` with the
shipped configuration and alert rules: every rule evaluates without error, only the alert the
server's state calls for fires (a critical job waiting past its SLO), and every dashboard query
runs, returning series for each caldera metric."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from deploy_support import (
    ALERTS,
    DCGM_NAMES,
    NVML_NAMES,
    PROMETHEUS_CONFIG,
    alert_rules,
    dashboard_queries,
    metric_names,
    prometheus_tool,
)
from service_support import Server, free_port, wait_for


@pytest.fixture(scope="module")
def prometheus(
    live_server: Server, live_metrics: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The shipped prometheus.yml and alerts.yaml, pointed at the live server, every second."""
    binary = prometheus_tool("prometheus")
    root = tmp_path_factory.mktemp("prometheus")
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    (root / "alerts.yaml").write_text(yaml.safe_dump(rules))
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["scrape_configs"] = [
        job for job in config["scrape_configs"] if job["job_name"] == "caldera"
    ]
    config["scrape_configs"][0]["static_configs"] = [
        {"targets": [live_server.url.removeprefix("http://")]}
    ]
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(root / "prometheus.log", "wb")  # noqa: SIM115 - the process owns it
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited: {(root / 'prometheus.log').read_text()[-2000:]}")
        try:
            return httpx.get(url + "/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for("prometheus to be ready", ready, timeout=30)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def api(url: str, path: str, **params: str) -> Any:
    answer = httpx.get(url + "/api/v1/" + path, params=params, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]


def firing(url: str) -> list[dict[str, Any]]:
    return [a for a in api(url, "alerts")["alerts"] if a["state"] == "firing"]


def test_only_the_critical_job_past_its_slo_fires(prometheus: str) -> None:
    wait_for("an alert to fire", lambda: firing(prometheus), timeout=30)
    time.sleep(3)  # a few more evaluations: nothing else may join it
    alerts = firing(prometheus)
    assert [(a["labels"]["alertname"], a["labels"].get("queue")) for a in alerts] == [
        ("CalderaCriticalJobPastSLO", "team-a")
    ]
    assert alerts[0]["labels"]["severity"] == "critical"


def test_every_rule_evaluates_without_error(prometheus: str) -> None:
    def evaluated() -> list[dict[str, Any]]:
        rules = [r for g in api(prometheus, "rules")["groups"] for r in g["rules"]]
        return rules if all(r["health"] != "unknown" for r in rules) else []

    rules = wait_for("every rule to be evaluated", evaluated, timeout=30)
    assert sorted(r["name"] for r in rules) == sorted(r["alert"] for r in alert_rules())
    assert {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"} == {}


@pytest.mark.parametrize("query", dashboard_queries(), ids=lambda q: q.where)
def test_dashboard_query_runs(query: Any, prometheus: str) -> None:
    names = metric_names(query.expr)
    if names & DCGM_NAMES:
        # No dcgm-exporter here: the query must run, and finds nothing.
        assert api(prometheus, "query", query=query.expr)["result"] == []
        return
    if names & NVML_NAMES:
        api(prometheus, "query", query=query.expr)  # runs; virtual GPUs have no readings
        return
    # rate() and delta() need two samples of a series: a few scrapes after start.
    wait_for(
        f"series for {query.expr}",
        lambda: api(prometheus, "query", query=query.expr)["result"],
        timeout=20,
        interval=0.5,
    )
