"""`caldera bench sim --breakdown` (caldera.bench.cycles): every cycle is counted once, under
the right trigger, and watching changes no decision."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

import caldera.sim.engine as engine
from builders import evict_and_release_scenario
from caldera.bench.cycles import ObservedSimulator
from caldera.cli.main import app
from caldera.sim import Simulator

runner = CliRunner()


def test_watching_changes_nothing_and_counts_every_cycle(monkeypatch: Any) -> None:
    runs: list[float] = []
    real = engine.run

    def counted(snapshot: Any, policy: Any) -> Any:
        runs.append(snapshot.now)
        return real(snapshot, policy)

    plain = Simulator(evict_and_release_scenario()).run().result()
    monkeypatch.setattr(engine, "run", counted)
    observed = ObservedSimulator(evict_and_release_scenario(), clock=lambda: float(len(runs)))
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
