"""`caldera bench sim --floor` (caldera.bench.floor): a run replayed from its recorded
decisions, without the core, applies exactly what the core decided — or is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import caldera.sim.engine as engine
from builders import evict_and_release_scenario
from caldera.bench.floor import RecordsDecisions, ReplayedSimulator, replay_floor
from caldera.bench.sim import burst_scenario
from caldera.cli.main import app
from caldera.sim import Simulator

runner = CliRunner()


@pytest.mark.parametrize(
    "build",
    [evict_and_release_scenario, lambda: burst_scenario(jobs=300, nodes=6, seed=3)],
    ids=["evict-and-release", "burst-300-on-6-nodes"],
)
def test_the_replay_applies_what_the_core_decided_without_running_it(
    build: Any, monkeypatch: Any
) -> None:
    scenario = build()
    recorded = RecordsDecisions(scenario).run()
    result = recorded.result()
    assert result == Simulator(scenario).run().result()  # recording changes nothing
    assert any(d.evictions for d in recorded.decided) and any(d.starts for d in recorded.decided)

    def no_core(snapshot: Any, policy: Any) -> Any:
        raise AssertionError("the replay ran the core")

    monkeypatch.setattr(engine, "run", no_core)
    # replay_floor raises unless the replay's document is the recorded run's
    wall, cpu = replay_floor(scenario, recorded.decided, result)
    assert wall >= 0 and cpu >= 0


def test_a_replay_that_runs_out_of_decisions_is_refused() -> None:
    recorded = RecordsDecisions(evict_and_release_scenario()).run()
    with pytest.raises(ValueError, match="more cycles than the recorded run"):
        ReplayedSimulator(evict_and_release_scenario(), recorded.decided[:-2]).run()


def test_a_replay_that_decides_differently_is_refused() -> None:
    recorded = RecordsDecisions(evict_and_release_scenario()).run()
    result = recorded.result()
    # The same decisions on a scenario whose last job arrives later: the events differ.
    with pytest.raises(ValueError, match="decided differently"):
        replay_floor(evict_and_release_scenario(later_submit=95), recorded.decided, result)
    # And a recorded run's own document, altered, is not what the replay gives.
    altered = {**result, "events": result["events"][:-1]}
    with pytest.raises(ValueError, match="decided differently"):
        replay_floor(evict_and_release_scenario(), recorded.decided, altered)


def test_bench_sim_floor_json() -> None:
    result = runner.invoke(
        app,
        ["bench", "sim", "--workload", "burst", "--jobs", "200", "--nodes", "4", "--json",
         "--floor", "--breakdown", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["floor_cpu_s"] >= 0 and row["floor_s"] >= 0
    assert row["cycle_count"] > 0  # --breakdown and --floor together
    plain = runner.invoke(app, ["bench", "sim", "--workload", "burst", "--jobs", "50", "--json"])
    assert plain.exit_code == 0, plain.output
    assert "floor_cpu_s" not in json.loads(plain.stdout)
