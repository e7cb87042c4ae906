"""The baselines through the simulator: what their rules do to jobs over time — gangs cut and
hanging, work lost since the last periodic checkpoint, freed room going to whoever comes first.

Scenarios are written out here, small enough to follow by hand; each comment says where the
expected number comes from.
"""

from __future__ import annotations

from typing import Any

import pytest

from caldera.sim import parse_scenario, simulate

HOUR = 3600.0


def run(policy: str, jobs: list[dict[str, Any]], nodes: int = 2) -> dict[str, Any]:
    scenario = parse_scenario(
        {
            "cluster": {"nodes": [{"prefix": "n", "count": nodes, "gpus": 8}]},
            "queues": [{"name": "team"}],
            "jobs": jobs,
            "until": 12 * HOUR,
        }
    )
    return simulate(scenario, policy)


def events(result: dict[str, Any], kind: str, job: str | None = None) -> list[dict[str, Any]]:
    return [e for e in result["events"] if e["kind"] == kind and (job is None or e["job"] == job)]


def record(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(j for j in result["jobs"] if j["name"] == name)


# A 2 × 8 normal gang with hourly checkpoints runs from 0; a 1 × 8 large job arrives at 5000 s.
GANG_CUT = [
    {
        "name": "gang",
        "queue": "team",
        "type": "normal",
        "submit": 0,
        "duration": 4 * HOUR,
        "tasks": 2,
        "gpus_per_task": 8,
        "checkpoint_interval": HOUR,
        "checkpoint_cost": 60,
    },
    {
        "name": "big",
        "queue": "team",
        "type": "large-job",
        "submit": 5000,
        "duration": HOUR,
        "tasks": 1,
        "gpus_per_task": 8,
    },
]


@pytest.mark.parametrize("policy", ["priority-kill", "volcano"])
def test_a_cut_gang_hangs_and_loses_work_since_its_checkpoint(policy: str) -> None:
    result = run(policy, GANG_CUT)
    metrics = result["metrics"]
    evictions = events(result, "evict", "gang")
    # One pod of the gang is evicted, not the gang: the other keeps its 8 GPUs and hangs.
    assert [(e["tasks"], e["gpus"], e["reason"], e["preemptor"]) for e in evictions] == [
        (1, 8, "preempt", "big")
    ]
    assert metrics["gang_hang_events"] == 1
    # It hangs from the eviction (5000 s) until its missing pod finds room again: when big
    # ends (5030 + 3600 = 8630 s). 8 GPUs × 3630 s.
    assert metrics["gang_hang_gpu_hours"] == pytest.approx(8 * 3630 / HOUR)
    # No checkpoint signal: 5000 s of work, the last periodic checkpoint at 3600 s, both pods.
    assert record(result, "gang")["lost_gpu_seconds"] == pytest.approx(16 * 1400)
    # The missing pod comes back as a grow of the running job; the gang then finishes.
    assert [e["t"] for e in events(result, "start", "gang") if e.get("grow")] == [8630.0]
    assert record(result, "gang")["state"] == "Succeeded"
    # 30 s grace period, then the large job starts.
    assert record(result, "big")["start"] == 5030.0


def test_caldera_takes_the_whole_gang_and_lets_it_checkpoint() -> None:
    """The same situation under caldera, for contrast: no hang, nothing lost."""
    result = run("caldera", GANG_CUT)
    assert result["metrics"]["gang_hang_gpu_hours"] == 0
    assert result["metrics"]["gang_hang_events"] == 0
    assert record(result, "gang")["lost_gpu_seconds"] == 0


def test_fifo_lets_the_large_job_wait() -> None:
    result = run("fifo", GANG_CUT)
    assert events(result, "evict") == []
    assert record(result, "big")["start"] == 4 * HOUR  # when the gang finishes


def test_no_reservation_freed_room_goes_to_whoever_comes_first() -> None:
    """priority-kill: big evicts a pod at 1000 s; a critical job arriving at 1010 s is ordered
    first when that room is released at 1030 s and takes it; big has to evict again."""
    jobs = [
        {
            "name": "a",
            "queue": "team",
            "type": "normal",
            "submit": 0,
            "duration": 8 * HOUR,
            "gpus_per_task": 8,
        },
        {
            "name": "b",
            "queue": "team",
            "type": "normal",
            "submit": 0,
            "duration": 8 * HOUR,
            "gpus_per_task": 8,
        },
        {
            "name": "big",
            "queue": "team",
            "type": "large-job",
            "submit": 1000,
            "duration": HOUR,
            "gpus_per_task": 8,
        },
        {
            "name": "api",
            "queue": "team",
            "type": "critical",
            "submit": 1010,
            "duration": HOUR,
            "gpus_per_task": 8,
        },
    ]
    result = run("priority-kill", jobs)
    by_big = [(e["t"], e["job"]) for e in events(result, "evict") if e["preemptor"] == "big"]
    first_victim = by_big[0][1]
    assert [t for t, _ in by_big] == [1000.0, 1010.0]  # a second victim for the same job
    api_start = events(result, "start", "api")[0]
    victim_node = events(result, "start", first_victim)[0]["placement"]
    assert api_start["t"] == 1030.0
    assert api_start["placement"] == victim_node  # the critical job took big's freed room
    assert record(result, "big")["start"] == 1040.0
    assert result["metrics"]["critical_preempted"] == 0
