"""The search memo (core/memo.py) changes no decision: random workloads simulated with and
without it give the same output document — every event, placement and metric.

The workloads are crowded on purpose (many jobs on few GPUs, arriving close together) so
that victim searches fail and the memo is consulted; `test_the_memo_is_used` checks that it
is, so that the equality is not vacuous."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings

from caldera.sim import Simulator, parse_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sim_properties import scenarios


def _simulate(data: dict[str, Any], memoize: bool) -> tuple[dict[str, Any], int]:
    simulator = Simulator(parse_scenario(data, Path.cwd(), "memo"), memoize=memoize)
    simulator.run()
    return simulator.result(), simulator.memo_hits


@settings(max_examples=40, deadline=None)
@given(scenarios(max_nodes=3, max_jobs=30))
def test_decisions_are_identical_with_and_without_the_memo(data: dict[str, Any]) -> None:
    cached, _ = _simulate(data, memoize=True)
    plain, hits = _simulate(data, memoize=False)
    assert hits == 0
    assert cached == plain


def test_the_memo_is_used() -> None:
    """A full cluster of critical work (never a victim) and a backlog of large jobs arriving
    one a minute, after each preemption backoff: the head's search fails once and is not
    repeated while nothing that could change its answer happens."""
    running = [
        {
            "name": f"serve{i}",
            "queue": "team",
            "type": "critical",
            "submit": 0,
            "duration": 7200,
            "gpus_per_task": 8,
        }
        for i in range(2)
    ]
    waiting = [
        {
            "name": f"train{i}",
            "queue": "team",
            "type": "large-job",
            "submit": 60 * (i + 1),
            "duration": 600,
            "gpus_per_task": 8,
        }
        for i in range(20)
    ]
    data = {
        "cluster": {"nodes": [{"prefix": "n", "count": 2, "gpus": 8}]},
        "queues": [{"name": "team", "weight": 1}],
        "jobs": running + waiting,
    }
    cached, hits = _simulate(data, memoize=True)
    plain, _ = _simulate(data, memoize=False)
    assert hits >= 10
    assert cached == plain
