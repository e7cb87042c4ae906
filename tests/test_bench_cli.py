"""`caldera bench cycle` prints p50/p95 in its JSON and refuses nonsense, in one line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from caldera.cli.main import app


def test_bench_cycle_json_reports_percentiles() -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "cycle",
            "--nodes",
            "16",
            "--gpus-per-node",
            "8",
            "--pending",
            "50",
            "--running",
            "40",
            "--cycles",
            "3",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["gpus"] == 128 and report["pending"] == 50
    assert 0 < report["p50_ms"] <= report["p95_ms"] <= report["max_ms"]
    assert report["running"] > 0 and report["snapshot_build_ms"] > 0


def test_bench_cycle_refuses_zero_nodes() -> None:
    result = CliRunner().invoke(app, ["bench", "cycle", "--nodes", "0", "--json"])
    assert result.exit_code == 2
    assert "error" in result.output and "Traceback" not in result.output
