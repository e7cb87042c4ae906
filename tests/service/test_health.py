"""What a drained GPU asks of the jobs on it (`caldera.service.health.drain_intents`): which
tasks leave, with which grace period, and which leaving tasks are killed at once."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from builders import job
from caldera.core import EvictReason, TaskPlacement
from caldera.model import JobState
from caldera.service.gpus.health import Finding, Severity
from caldera.service.gpus.watch import Drain
from caldera.service.health import DrainEvict, KillNow, drain_intents
from caldera.service.jobs import LiveJob, TaskRun

GRACE = 30.0
NOW = 1000.0


def live(
    name: str, devices: list[int], min_available: int, state: JobState = JobState.RUNNING
) -> LiveJob:
    spec = job(name).gang(len(devices), 1, min_available).build()
    leaving = state is JobState.RELEASING
    tasks = [
        TaskRun(rank, 1, TaskPlacement(0, (device,), 1000), leaving=leaving, kill_at=NOW + 20)
        for rank, device in enumerate(devices)
    ]
    return LiveJob(spec=spec, state=state, tasks=tasks, request={})


def drain(devices: tuple[int, ...], severity: Severity) -> Drain:
    return Drain(devices, Finding(devices[0], f"GPU-{devices[0]}", "XID 79", severity))


@dataclass(frozen=True)
class Case:
    what: str
    job: LiveJob
    severity: Severity
    tasks: tuple[int, ...] | None  # evicted tasks (() = the whole job); None: no eviction
    grace: float | None = None
    killed: tuple[int, ...] = ()  # ranks killed now


CASES = [
    Case("gang that can spare the task", live("a", [0, 1, 2], 2), Severity.DRAIN, (0,), GRACE),
    Case("gang that cannot: all of it", live("b", [0, 1], 2), Severity.DRAIN, (), GRACE),
    Case("lost GPU: no grace", live("c", [0, 1, 2], 2), Severity.FATAL, (0,), 0.0),
    Case("not on the GPU", live("d", [3, 4], 1), Severity.FATAL, None),
    Case(
        "already leaving, lost GPU: killed now",
        live("e", [0, 5], 2, JobState.RELEASING),
        Severity.FATAL,
        None,
        killed=(0,),
    ),
    Case(
        "already leaving, GPU still alive: keeps its grace",
        live("f", [0, 5], 2, JobState.RELEASING),
        Severity.DRAIN,
        None,
    ),
    Case("pending jobs hold nothing", live("g", [0], 1, JobState.PENDING), Severity.FATAL, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_what_a_drained_gpu_asks_of_a_job(case: Case) -> None:
    intents = drain_intents(drain((0,), case.severity), [case.job], GRACE, NOW)
    evicts = [i for i in intents if isinstance(i, DrainEvict)]
    kills = [i.task.rank for i in intents if isinstance(i, KillNow)]
    assert kills == list(case.killed)
    if case.tasks is None:
        assert evicts == []
        return
    (intent,) = evicts
    assert intent.job is case.job
    assert intent.evict.job == case.job.id
    assert intent.evict.reason is EvictReason.HEALTH
    assert intent.evict.tasks == case.tasks
    assert intent.grace == case.grace
    assert intent.evict.release_at == NOW + case.grace
    assert intent.detail == {"gpu": "GPU-0", "gpu_reason": "XID 79"}
