"""`caldera bench k8s` end to end, small: its own dev cluster, the controller as a process,
every pod bound, figures that make sense (measured figures: docs/benchmarks.md), and in
steady state no full re-list (issue 10, item 4): neither the controller's informers nor the
API server (which counts every client's LISTs) see one."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from caldera.cli.main import app


def test_bench_k8s_binds_every_pod_and_reports_latency_cpu_memory_and_recovery(
    cluster_bins: Path,  # the binaries are there (built under CI); the bench starts its cluster
) -> None:
    args = ["bench", "k8s", "--nodes", "4", "--jobs", "12", "--steady", "15", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["bound"] == 12
    assert 0 <= report["bind_p50_s"] <= report["bind_p99_s"] <= report["bind_max_s"] < 60
    assert 0 < report["all_bound_s"] < 300
    assert report["controller_cpu_s"] > 0 and 30 < report["controller_rss_mib"] < 1024
    assert 0 < report["recovery_s"] < 120
    assert report["cycles"] > 0 and report["requests"] > report["cycles"]
    assert report["steady_s"] >= 15 and report["steady_cycles"] >= 1
    assert report["steady_lists"] == 0, report
    listed = report["steady_server_lists"]
    assert not {"trainingjobs", "pods", "nodes"} & set(listed), listed
