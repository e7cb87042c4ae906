"""The runtime's rules on an in-memory process seam and a fake clock: what a decision does,
what it may never do (signal a critical or protected job, give a GPU twice), grace periods,
requeue with the checkpoint, restart recovery. Fast: no processes, no HTTP."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from caldera.core import Decisions, Evict, EvictReason, Start, TaskPlacement
from caldera.model import JobState
from caldera.service.config import parse_config
from caldera.service.gpus import local_node
from caldera.service.launcher import JobFiles, Launch
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for

CONFIG = {
    "queues": [{"name": "team-a"}, {"name": "ops"}],
    "tokens": [{"token": "ops-token-0001", "user": "ops", "critical": True, "admin": True}],
    "policy": {"grace_period": 10, "throttle_timeout": 100},
}


@dataclass
class FakeLauncher:
    """The process seam in memory: spawns are recorded, exits are set by the test."""

    launches: list[Launch] = field(default_factory=list)
    signals: list[tuple[int, signal.Signals]] = field(default_factory=list)
    exits: dict[int, int | None] = field(default_factory=dict)  # pid -> exit code

    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        self.launches.append(launch)
        return 1000 + len(self.launches), 1

    def ended(
        self, files: JobFiles, attempt: int, rank: int, pid: int | None, ticks: int | None
    ) -> tuple[bool, int | None]:
        if pid in self.exits:
            return True, self.exits[pid]
        return False, None

    def recorded(self, files: JobFiles, attempt: int, rank: int) -> tuple[int, int | None] | None:
        return None

    def signal(self, pid: int | None, ticks: int | None, signum: signal.Signals) -> bool:
        assert pid is not None
        self.signals.append((pid, signum))
        return True


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path: Path) -> Any:
    store = Store(database_url_for(tmp_path))
    store.migrate()
    launcher = FakeLauncher()
    clock = Clock()
    node, _ = local_node(8)
    runtime = Runtime(parse_config(CONFIG), store, tmp_path, (node,), launcher, clock)
    runtime.recover()
    yield runtime, launcher, clock
    store.close()


def request(**fields: Any) -> dict[str, Any]:
    base = {
        "name": "job",
        "queue": "team-a",
        "type": "normal",
        "tasks": 1,
        "gpu": 8000,
        "min_available": 1,
        "command": ["true"],
        "env": {},
        "labels": {},
        "checkpoint": {"interval": None, "cost": 0.0, "on_sigterm": True},
        "max_retries": 0,
    }
    base.update(fields)
    return base


def run_job(runtime: Runtime, **fields: Any) -> str:
    job_id: str = runtime.submit(request(**fields), "ops")["id"]
    runtime.cycle()
    assert runtime.jobs[job_id].state is JobState.RUNNING
    return job_id


@pytest.mark.parametrize(
    "fields",
    [{"type": "critical", "queue": "ops"}, {"labels": {"protected": "true"}}],
    ids=["critical", "protected"],
)
def test_a_critical_or_protected_job_is_never_signalled(world: Any, fields: Any) -> None:
    runtime, launcher, clock = world
    job_id = run_job(runtime, **fields)
    snapshot = runtime.snapshot(clock.now)
    asked = Evict(job_id, EvictReason.PREEMPT, "someone", (), 8000)
    runtime.apply(Decisions(evictions=(asked,)), snapshot)
    assert launcher.signals == []
    assert runtime.jobs[job_id].state is JobState.RUNNING
    assert runtime.stats.refused_evictions == 1


def test_a_gpu_is_never_given_twice(world: Any) -> None:
    runtime, launcher, clock = world
    run_job(runtime)
    other = runtime.submit(request(), "ops")["id"]
    snapshot = runtime.snapshot(clock.now)
    taken = TaskPlacement(0, tuple(range(8)), 1000)
    runtime.apply(Decisions(starts=(Start(other, (taken,)),)), snapshot)
    assert runtime.jobs[other].state is JobState.PENDING
    assert len(launcher.launches) == 1


def test_evicted_job_is_requeued_whatever_its_exit_code_and_resumes(world: Any) -> None:
    runtime, launcher, clock = world
    job_id = run_job(runtime, checkpoint={"interval": None, "cost": 0.0, "on_sigterm": True})
    first = launcher.launches[0]
    assert first.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert (first.env["RANK"], first.env["WORLD_SIZE"], first.env["LOCAL_RANK"]) == ("0", "1", "0")
    clock.now += 100
    runtime.apply(
        Decisions(evictions=(Evict(job_id, EvictReason.PREEMPT, None, (), 8000),)),
        runtime.snapshot(clock.now),
    )
    assert launcher.signals == [(1001, signal.SIGTERM)]
    job = runtime.jobs[job_id]
    assert job.state is JobState.RELEASING
    # The job writes its emergency checkpoint through the SDK's status file, then exits 1.
    control = Path(first.env["CALDERA_CONTROL_DIR"])
    control.mkdir(parents=True, exist_ok=True)  # the real launcher makes it, this fake does not
    report = {"checkpoint": {"step": 42, "time": clock.now + 1}}
    (control / "rank-0.json").write_text(json.dumps(report))
    clock.now += 2
    launcher.exits[1001] = 1
    runtime.step()  # sees the exit, requeues, and the next cycle starts it again
    kinds = [(e["kind"], e["data"].get("reason")) for e in runtime.store.events(job=job_id)]
    assert ("checkpoint", "sigterm") in kinds
    assert ("requeue", "evicted") in kinds  # requeued: the exit code does not matter
    assert (job.evictions, job.checkpoint_step, job.attempts) == (1, 42, 2)
    assert job.saved_work == pytest.approx(100.0)
    assert job.lost_gpu_seconds == 0.0  # the emergency checkpoint saved everything
    second = launcher.launches[1]
    assert second.env["CALDERA_CHECKPOINT_DIR"] == first.env["CALDERA_CHECKPOINT_DIR"]
    assert second.env["CALDERA_RESUME_STEP"] == "42"
    assert job.state is JobState.RUNNING and job.work_base == pytest.approx(100.0)


def test_grace_period_ends_with_sigkill(world: Any) -> None:
    runtime, launcher, clock = world
    job_id = run_job(runtime)
    clock.now += 50
    runtime.apply(
        Decisions(evictions=(Evict(job_id, EvictReason.PREEMPT, None, (), 8000),)),
        runtime.snapshot(clock.now),
    )
    clock.now += 9.9
    runtime.step()
    assert launcher.signals == [(1001, signal.SIGTERM)]
    clock.now += 0.2
    runtime.step()
    assert launcher.signals == [(1001, signal.SIGTERM), (1001, signal.SIGKILL)]
    launcher.exits[1001] = None  # killed: the runner could not record a code
    runtime.step()
    job = runtime.jobs[job_id]
    assert (job.attempts, job.state) == (2, JobState.RUNNING)  # requeued, started again
    assert job.lost_gpu_seconds == pytest.approx(8 * 50)  # no checkpoint: all work lost


def test_failed_task_stops_its_gang_and_the_job_fails(world: Any) -> None:
    runtime, launcher, _clock = world
    job_id = run_job(runtime, tasks=2, gpu=4000, min_available=2)
    launcher.exits[1002] = 7
    runtime.step()
    assert launcher.signals == [(1001, signal.SIGTERM)]
    launcher.exits[1001] = -15
    runtime.step()
    row = runtime.store.job(job_id)
    assert row is not None and (row["state"], row["exit_code"]) == ("Failed", 7)
    assert job_id not in runtime.jobs


def test_restart_requeues_tasks_that_were_never_spawned(world: Any, tmp_path: Path) -> None:
    runtime, _launcher, clock = world
    job_id = runtime.submit(request(), "ops")["id"]
    snapshot = runtime.snapshot(clock.now)
    placement = TaskPlacement(0, tuple(range(8)), 1000)
    # The server dies after committing the start and before spawning: drop the spawn.
    runtime._spawn = lambda job, task: None  # type: ignore[method-assign]
    runtime.apply(Decisions(starts=(Start(job_id, (placement,)),)), snapshot)
    assert runtime.store.job(job_id)["state"] == "Running"  # type: ignore[index]

    node, _ = local_node(8)
    config = parse_config(CONFIG)
    again = Runtime(config, runtime.store, tmp_path, (node,), FakeLauncher(), clock)
    again.recover()
    assert again.jobs[job_id].state is JobState.PENDING
    assert all(free == [1000] * 8 for free in again.room.free)
    kinds = [e["kind"] for e in again.store.events(job=job_id)]
    assert kinds[-1] == "requeue"


def test_partial_eviction_keeps_the_gang_running(world: Any) -> None:
    runtime, launcher, clock = world
    job_id = run_job(runtime, tasks=4, gpu=2000, min_available=2)
    runtime.apply(
        Decisions(evictions=(Evict(job_id, EvictReason.PREEMPT, None, (2, 3), 4000),)),
        runtime.snapshot(clock.now),
    )
    assert sorted(launcher.signals) == [(1003, signal.SIGTERM), (1004, signal.SIGTERM)]
    job = runtime.jobs[job_id]
    assert job.state is JobState.RUNNING and job.evictions == 1
    launcher.exits.update({1003: 143, 1004: 143})
    runtime.step()
    assert [t.rank for t in job.tasks] == [0, 1]
    assert sum(free.count(1000) for free in runtime.room.free) == 4  # their GPUs are back
    assert job.state is JobState.RUNNING


def test_restart_adopts_a_task_known_only_from_its_runner_record(
    world: Any, tmp_path: Path
) -> None:
    runtime, _launcher, clock = world
    job_id = runtime.submit(request(), "ops")["id"]
    placement = TaskPlacement(0, tuple(range(8)), 1000)
    # The server dies after spawning, before committing the pid: the runner's file knows it.
    runtime._spawn = lambda job, task: None  # type: ignore[method-assign]
    runtime.apply(Decisions(starts=(Start(job_id, (placement,)),)), runtime.snapshot(clock.now))

    class Recording(FakeLauncher):
        def recorded(
            self, files: JobFiles, attempt: int, rank: int
        ) -> tuple[int, int | None] | None:
            return 4242, 7

    node, _ = local_node(8)
    again = Runtime(parse_config(CONFIG), runtime.store, tmp_path, (node,), Recording(), clock)
    again.recover()
    job = again.jobs[job_id]
    assert job.state is JobState.RUNNING
    assert (job.tasks[0].pid, job.tasks[0].start_ticks) == (4242, 7)
    assert all(free == [0] * 8 for free in again.room.free)
