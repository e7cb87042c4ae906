"""Which way the comparison goes on small seeded workloads (issue 4), never by how much.

One 64-GPU pool (8 nodes × 8, leaves of 4 nodes), one team queue, one day of the production
generator's mix scaled down: 16–32 GPU production gangs, research gangs of 4-GPU tasks (so
per-pod preemption can cut them), debug sessions and critical inference — all in one queue so
every policy's same-queue preemption is in play.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from caldera.policies import policy_names
from caldera.sim import parse_scenario, simulate

BASELINES = ("volcano", "priority-kill")


def pool(seed: int, philly: Path) -> dict[str, Any]:
    return {
        "workload": {
            "generators": [
                {
                    "kind": "production",
                    "seed": seed,
                    "days": 1,
                    "nodes": 8,
                    "nodes_per_tier1": 4,
                    "tier1_per_tier2": 2,
                    "production": {
                        "queue": "team",
                        "per_day": 12,
                        "gpus": [16, 32],
                        "weights": [0.6, 0.4],
                        "median_hours": 3,
                        "max_hours": 8,
                    },
                    "research": {
                        "queue": "team",
                        "per_day": 160,
                        "gpus": [2, 4, 8, 16],
                        "weights": [0.3, 0.3, 0.2, 0.2],
                        "gpus_per_task": 4,
                        "runtimes": str(philly),
                    },
                    "debug": {"queue": "team", "per_day": 40},
                    "inference": {
                        "queue": "team",
                        "per_day": 30,
                        "gpus": [1, 2],
                        "weights": [0.5, 0.5],
                    },
                }
            ]
        },
        "until": 86_400,
    }


@cache
def run(seed: int, policy: str, philly: Path) -> dict[str, Any]:
    return simulate(parse_scenario(pool(seed, philly)), policy)["metrics"]


def need_baselines() -> None:
    missing = [name for name in BASELINES if name not in policy_names()]
    if missing:
        pytest.skip(f"baselines not registered yet: {', '.join(missing)}")


@pytest.mark.parametrize("seed", [3, 5, 9])
def test_caldera_never_preempts_critical_nor_leaves_a_gang_hanging(seed: int, philly: Path) -> None:
    metrics = run(seed, "caldera", philly)
    assert metrics["preemptions"]["total"] > 0  # the workload does contend
    assert metrics["critical_preempted"] == 0
    assert metrics["gang_hang_gpu_hours"] == 0 and metrics["gang_hang_events"] == 0


@pytest.mark.parametrize("seed", [3, 5, 9])
def test_caldera_loses_less_work_than_the_preempting_baselines(seed: int, philly: Path) -> None:
    need_baselines()
    caldera = run(seed, "caldera", philly)["wasted_gpu_hours"]
    for baseline in BASELINES:
        assert caldera < run(seed, baseline, philly)["wasted_gpu_hours"], baseline


@pytest.mark.parametrize("seed", [3, 5, 9])
def test_per_pod_preemption_cuts_gangs(seed: int, philly: Path) -> None:
    """priority-kill evicts pods, not gangs: a cut gang keeps holding GPUs (gang hang)."""
    need_baselines()
    metrics = run(seed, "priority-kill", philly)
    assert metrics["gang_hang_events"] > 0 and metrics["gang_hang_gpu_hours"] > 0


def test_fifo_never_evicts(philly: Path) -> None:
    if "fifo" not in policy_names():
        pytest.skip("fifo not registered yet")
    metrics = run(3, "fifo", philly)
    assert metrics["preemptions"]["total"] == 0 and metrics["wasted_gpu_hours"] == 0
