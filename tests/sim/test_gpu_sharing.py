"""GPUs as they really are, in the simulator: time-sharing queues (seed 004's development
queues). MIG slices join this file with the core's support for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from caldera.model import JobSpec, JobType, Queue, time_share
from caldera.sim import parse_scenario, simulate


@dataclass(frozen=True)
class Case:
    name: str
    tasks: int = 1
    gpu: int = 1000
    type: JobType = JobType.DEBUG
    ways: int = 4
    want_gpu: int = 250
    want_shared: int = 4


SHARING_CASES = [
    Case("a 1-GPU debug job shares"),
    Case("a 1-GPU normal job shares", type=JobType.NORMAL),
    Case("3 ways: a third each", ways=3, want_gpu=333, want_shared=3),
    Case("a gang never shares", tasks=2, want_gpu=1000, want_shared=0),
    Case("a multi-GPU task never shares", gpu=2000, want_gpu=2000, want_shared=0),
    Case("a large job never shares", type=JobType.LARGE, want_gpu=1000, want_shared=0),
    Case("a fraction stays a fraction", gpu=500, want_gpu=500, want_shared=0),
    Case("a queue without sharing", ways=0, want_gpu=1000, want_shared=0),
]


@pytest.mark.parametrize("case", SHARING_CASES, ids=[c.name for c in SHARING_CASES])
def test_which_jobs_time_share(case: Case) -> None:
    spec = JobSpec("j", "j", "dev", case.type, 0.0, tasks=case.tasks, gpu=case.gpu)
    shared = time_share(spec, Queue("dev", time_sharing=case.ways))
    assert (shared.gpu, shared.time_shared) == (case.want_gpu, case.want_shared)
    assert time_share(shared, Queue("dev", time_sharing=case.ways)) == shared  # idempotent


def dev_scenario(jobs: list[dict[str, Any]], ways: int = 4) -> dict[str, Any]:
    defaults = {"queue": "dev", "type": "debug", "submit": 0, "duration": 100}
    return {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 2}]},
        "queues": [{"name": "dev", "time_sharing": ways}],
        "jobs": [{**defaults, **j} for j in jobs],
    }


def starts(result: dict[str, Any]) -> dict[str, float]:
    return {e["job"]: e["t"] for e in result["events"] if e["kind"] == "start"}


def test_a_time_sharing_queue_puts_n_tasks_on_one_gpu() -> None:
    jobs = [{"name": f"d{i}"} for i in range(9)]
    result = simulate(parse_scenario(dev_scenario(jobs)))
    begun = starts(result)
    # 2 GPUs × 4 ways: eight run at once, each counted as a quarter GPU; the ninth waits.
    assert sorted(begun.values()) == [0.0] * 8 + [100.0]
    first = next(e for e in result["events"] if e["kind"] == "start")
    assert first["gpus"] == 0.25


def test_time_sharing_never_splits_a_training_gang() -> None:
    jobs = [
        {"name": "gang", "tasks": 2, "gpus_per_task": 1, "type": "normal"},
        {"name": "d0"},
    ]
    result = simulate(parse_scenario(dev_scenario(jobs)))
    gang = next(e for e in result["events"] if e["kind"] == "start" and e["job"] == "gang")
    assert gang["gpus"] == 2  # two whole GPUs
    assert starts(result)["d0"] == 100.0  # no GPU left to share until the gang ends


def test_without_time_sharing_nothing_changes() -> None:
    jobs = [{"name": f"d{i}"} for i in range(3)]
    plain = dev_scenario(jobs, ways=0)
    assert sorted(starts(simulate(parse_scenario(plain))).values()) == [0.0, 0.0, 100.0]
