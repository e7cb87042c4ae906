"""`caldera bench sim --breakdown` (caldera.bench.cycles): every cycle is counted once, under
the right trigger, and watching changes no decision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import caldera.sim.engine as engine
from caldera.bench.cycles import ObservedSimulator
from caldera.cli.main import app
from caldera.sim import Simulator, parse_scenario

runner = CliRunner()


def _scenario() -> Any:
    """One 8-GPU node: a normal job fills it, a critical job arrives and takes one GPU back
    (an eviction, then its release after the grace period), a second normal job waits."""
    data = {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 8}]},
        "queues": [{"name": "team", "weight": 1}],
        "jobs": [
            {"name": "fill", "queue": "team", "type": "normal", "submit": 0, "duration": 600,
             "gpus_per_task": 8},
            {"name": "serve", "queue": "team", "type": "critical", "submit": 60,
             "duration": 300, "gpus_per_task": 1},
            {"name": "later", "queue": "team", "type": "normal", "submit": 90, "duration": 60,
             "gpus_per_task": 8},
        ],
    }  # fmt: skip
    return parse_scenario(data, Path.cwd(), "breakdown")


def test_watching_changes_nothing_and_counts_every_cycle(monkeypatch: Any) -> None:
    runs: list[float] = []
    real = engine.run

    def counted(snapshot: Any, policy: Any) -> Any:
        runs.append(snapshot.now)
        return real(snapshot, policy)

    plain = Simulator(_scenario()).run().result()
    monkeypatch.setattr(engine, "run", counted)
    observed = ObservedSimulator(_scenario(), clock=lambda: float(len(runs)))
    assert observed.run().result() == plain
    rows = observed.breakdown.as_list()
    assert sum(row["cycles"] for row in rows) == len(runs)
    by_trigger: dict[str, int] = {}
    for row in rows:
        by_trigger[row["trigger"]] = by_trigger.get(row["trigger"], 0) + row["cycles"]
    # three submissions, an eviction's release, two finishes (at least one cycle each)
    assert by_trigger.get("submit", 0) >= 3
    assert any("release" in trigger for trigger in by_trigger)
    assert any("finish" in trigger for trigger in by_trigger)
    # the first submission started the job that fills the node: a cycle that decided
    assert any(row["trigger"] == "submit" and row["decided"] for row in rows)
    # the fake clock ticks once per call of the core: each cycle's time is its one call alone
    assert sum(row["cpu_s"] for row in rows) == len(runs)


def test_bench_sim_breakdown_json() -> None:
    result = runner.invoke(
        app,
        ["bench", "sim", "--workload", "burst", "--jobs", "200", "--nodes", "4", "--json",
         "--breakdown", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["cycle_count"] == sum(entry["cycles"] for entry in row["cycles"]) > 0
    assert {entry["trigger"] for entry in row["cycles"]} >= {"submit"}
    assert all(entry["cpu_s"] >= 0 for entry in row["cycles"])
