"""`caldera compare --jobs N`: policies in parallel processes, the serial run's output."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from compare_support import DYING_EXIT, DyingScenario
from typer.testing import CliRunner

from caldera.cli import compare
from caldera.cli.compare_runs import PolicyFailure, run_in_parallel
from caldera.cli.main import app
from caldera.sim import load_scenario

runner = CliRunner()
EXAMPLE = Path(__file__).parents[2] / "src" / "caldera" / "examples" / "mig-mixed.yaml"
POLICIES = "caldera,volcano,priority-kill"


def _compare(*extra: str) -> Any:
    return runner.invoke(app, ["compare", str(EXAMPLE), "--policies", POLICIES, *extra])


def _without_wall_time(document: dict[str, Any]) -> dict[str, Any]:
    for entry in document["results"].values():
        del entry["wall_seconds"]  # how long a run took: differs between any two runs
    return document


def test_parallel_table_is_the_serial_one_byte_for_byte() -> None:
    serial = _compare("--jobs", "1")
    parallel = _compare("--jobs", "2")
    assert serial.exit_code == 0, serial.output
    assert parallel.exit_code == 0, parallel.output
    assert "caldera" in serial.stdout and "priority-kill" in serial.stdout
    assert parallel.stdout == serial.stdout


def test_parallel_json_is_the_serial_one_but_for_wall_time() -> None:
    serial = _compare("--jobs", "1", "--json")
    parallel = _compare("--jobs", "3", "--json")
    assert serial.exit_code == 0 and parallel.exit_code == 0, serial.output + parallel.output
    first, second = json.loads(serial.stdout), json.loads(parallel.stdout)
    assert list(second["results"]) == POLICIES.split(",")
    assert _without_wall_time(second) == _without_wall_time(first)


@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_jobs_below_one_is_a_one_line_error(jobs: str) -> None:
    result = _compare("--jobs", jobs)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"caldera: error: --jobs must be at least 1 (got {jobs})"


@pytest.mark.parametrize("jobs", [1, 2], ids=["serial", "parallel"])
def test_a_failing_policy_costs_only_its_own_run(jobs: int) -> None:
    scenario = load_scenario(EXAMPLE)
    runs, failures = run_in_parallel(scenario, ["fifo", "no-such-policy", "caldera"], jobs, True)
    assert [run.policy for run in runs] == ["fifo", "caldera"]
    assert [failure.policy for failure in failures] == ["no-such-policy"]
    reason = failures[0].reason
    assert "no-such-policy" in reason and "\n" not in reason and "Traceback" not in reason


def test_a_worker_that_dies_is_named_with_its_exit_code() -> None:
    base = load_scenario(EXAMPLE)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    scenario = DyingScenario(**fields)
    runs, failures = run_in_parallel(scenario, ["fifo", "dies"], 2, True)
    assert [run.policy for run in runs] == ["fifo"]
    assert failures == [PolicyFailure("dies", f"its process exited with code {DYING_EXIT}")]


def test_the_command_prints_what_finished_then_one_line_per_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = load_scenario(EXAMPLE)
    (finished,), _ = run_in_parallel(scenario, ["fifo"], 1, True)

    def one_failed(*args: object) -> tuple[list[Any], list[PolicyFailure]]:
        return [finished], [PolicyFailure("volcano", "MemoryError")]

    monkeypatch.setattr(compare, "run_in_parallel", one_failed)
    result = runner.invoke(app, ["compare", str(EXAMPLE), "--policies", "fifo,volcano"])
    assert result.exit_code == 1
    assert "fifo" in result.stdout and "volcano" not in result.stdout
    assert result.stderr.strip() == "caldera: error: volcano failed: MemoryError"
