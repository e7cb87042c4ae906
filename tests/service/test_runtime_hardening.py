"""The runtime against hostile or broken jobs (issue 15 items 1, 3, 5, 7), on the in-memory
process seam and a fake clock: a start that fails for any reason fails only its job and frees
its GPUs; no job is charged work it never did; a job's own progress claims defend it only when
its token is trusted; status files are read by name and safely; a big start never holds the
loop up and a cancel stops it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_runtime import CONFIG, FakeLauncher, request, run_job, world

from caldera.core import Decisions, Start, TaskPlacement
from caldera.model import JobState
from caldera.service.config import parse_config
from caldera.service.gpus import local_node
from caldera.service.launcher import JobFiles, Launch
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for

__all__ = ["world"]  # the fixture, shared with test_runtime


class PoisonLauncher(FakeLauncher):
    """Fails to start any task whose request env has POISON, the way Popen does on a NUL."""

    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        if launch.env.get("POISON") == str(launch.rank) or launch.env.get("POISON") == "all":
            raise ValueError("embedded null byte")
        return super().spawn(launch)


def test_a_start_that_fails_for_any_reason_fails_only_its_job(world: Any) -> None:
    runtime, _, clock = world
    launcher = runtime.launcher = PoisonLauncher()
    poison = runtime.submit(request(gpu=2000, env={"POISON": "all"}), "ops")["id"]
    innocents = [runtime.submit(request(gpu=2000), "ops")["id"] for _ in range(3)]
    runtime.cycle()  # one cycle starts all four
    row = runtime.store.job(poison)
    assert row is not None and row["state"] == "Failed" and row["exit_code"] == 127
    assert row["reason"] == "cannot start task 0: embedded null byte"
    assert row["lost_gpu_seconds"] == 0.0
    for job_id in innocents:
        job = runtime.jobs[job_id]
        assert job.state is JobState.RUNNING and job.tasks[0].pid is not None
    assert len(launcher.launches) == 3
    assert sum(free.count(1000) for free in runtime.room.free) == 2  # the poison's are back
    clock.now += 1
    late = runtime.submit(request(gpu=2000), "ops")["id"]
    runtime.cycle()
    assert runtime.jobs[late].state is JobState.RUNNING


def test_a_gang_member_that_cannot_start_stops_its_gang_and_costs_no_lost_work(
    world: Any,
) -> None:
    runtime, _, clock = world
    launcher = runtime.launcher = PoisonLauncher()
    job_id = runtime.submit(
        request(tasks=2, gpu=4000, min_available=2, env={"POISON": "1"}), "ops"
    )["id"]
    runtime.cycle()
    job = runtime.jobs[job_id]
    assert launcher.signals == [(1001, 15)]  # rank 0 is stopped: its gang cannot run
    clock.now += 30
    launcher.exits[1001] = -15
    runtime.step()
    row = runtime.store.job(job_id)
    assert row is not None and (row["state"], row["exit_code"]) == ("Failed", 127)
    assert row["reason"] == "cannot start task 1: embedded null byte"
    assert row["lost_gpu_seconds"] == 0.0  # the gang never ran: nothing was lost
    assert job_id not in runtime.jobs and all(f == [1000] * 8 for f in runtime.room.free)
    assert job.state is JobState.FAILED


def test_a_start_the_server_never_spawned_costs_no_lost_work(world: Any, tmp_path: Path) -> None:
    runtime, _, clock = world
    job_id = runtime.submit(request(), "ops")["id"]
    runtime._spawn = lambda job, task: None  # type: ignore[method-assign]  # the server dies
    placement = TaskPlacement(0, tuple(range(8)), 1000)
    runtime.apply(Decisions(starts=(Start(job_id, (placement,)),)), runtime.snapshot(clock.now))
    clock.now += 3600  # an hour until the next server starts
    node, _ = local_node(8)
    again = Runtime(parse_config(CONFIG), runtime.store, tmp_path, (node,), FakeLauncher(), clock)
    again.recover()
    job = again.jobs[job_id]
    assert job.state is JobState.PENDING and job.lost_gpu_seconds == 0.0
    requeue = again.store.events(job=job_id)[-1]
    assert requeue["kind"] == "requeue" and requeue["data"]["lost_gpu_seconds"] == 0.0


@pytest.mark.parametrize(("trusted", "evicted"), [(False, True), (True, False)])
def test_a_jobs_own_progress_claims_defend_it_only_when_its_token_is_trusted(
    world: Any, trusted: bool, evicted: bool
) -> None:
    runtime, _, clock = world
    victim = run_job(runtime, trust_progress=trusted, expected_duration=60)
    job = runtime.jobs[victim]
    clock.now += 2 * 3600  # two hours run: W_eff = 100 + 100·ln 3 ≈ 210 from time alone
    job.reported_progress = 1.0  # and it claims to be done: + 600 if believed (ceiling 800)
    runtime.kernel.mark(job)
    large = runtime.submit(request(type="large-job"), "ops")["id"]  # priority 800
    runtime.cycle()
    assert (job.state is JobState.RELEASING) is evicted
    assert runtime.jobs[large].state is JobState.PENDING
    assert job.view().reported_progress == (1.0 if trusted else 0.0)


def test_status_files_are_read_by_name_and_safely(
    world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, _, clock = world
    job_id = run_job(runtime)
    job = runtime.jobs[job_id]
    files = JobFiles(runtime.data_dir, job_id)
    files.control.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "other-job.json"
    elsewhere.write_text(json.dumps({"progress": 1.0}))

    def boom(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the control folder was scanned")

    monkeypatch.setattr(os, "scandir", boom)
    # A decoy, a link to another job's report, then a FIFO where the report should be.
    (files.control / "rank-7.json").write_text(json.dumps({"progress": 1.0}))
    (files.control / "rank-0.json").symlink_to(elsewhere)
    runtime.step()
    assert job.reported_progress is None
    (files.control / "rank-0.json").unlink()
    os.mkfifo(files.control / "rank-0.json")
    runtime.step()  # opening a FIFO for reading would block the loop: it is not opened
    assert job.reported_progress is None
    (files.control / "rank-0.json").unlink()
    # Well-formed: taken; out of range: dropped (a step beyond INTEGER, NaN progress).
    huge = {"progress": float("nan"), "checkpoint": {"time": clock.now, "step": 2**40}}
    (files.control / "rank-0.json").write_text(json.dumps(huge))
    clock.now += 1
    runtime.step()
    assert job.reported_progress is None and job.checkpoint_step is None
    assert job.checkpoint_seen == clock.now - 1  # the checkpoint itself counts
    good = {"progress": 0.25, "checkpoint": {"time": clock.now, "step": 12}}
    (files.control / "rank-0.json").write_text(json.dumps(good))
    os.utime(files.control / "rank-0.json", (clock.now + 5, clock.now + 5))
    runtime.step()
    assert (job.reported_progress, job.checkpoint_step) == (0.25, 12)
    assert runtime.store.job(job_id)["checkpoint_step"] == 12  # type: ignore[index]


@dataclass
class SlowLauncher(FakeLauncher):
    """Each spawn takes a while, as forks do on a busy host; a signalled task exits."""

    delay: float = 0.05

    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        time.sleep(self.delay)
        return super().spawn(launch)

    def signal(self, pid: int | None, ticks: int | None, signum: Any) -> bool:
        if pid is None:
            return False  # not spawned (yet): as the real launcher answers
        self.exits[pid] = -int(signum)
        return super().signal(pid, ticks, signum)


def test_a_big_start_never_holds_the_loop_and_cancel_stops_it(tmp_path: Path) -> None:
    store = Store(database_url_for(tmp_path))
    store.migrate()
    node, _ = local_node(8)
    launcher = SlowLauncher()
    runtime = Runtime(parse_config(CONFIG), store, tmp_path, (node,), launcher)
    runtime.start()
    try:
        big = runtime.submit(request(tasks=400, gpu=0, min_available=400), "ops")["id"]

        def wait(what: str, check: Any, timeout: float = 30) -> None:
            deadline = time.monotonic() + timeout
            while not check():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.02)

        wait("the big job to start spawning", lambda: len(launcher.launches) >= 5)
        # The loop goes on while it spawns: another job starts.
        other = runtime.submit(request(gpu=1000), "ops")["id"]
        wait("the other job to run", lambda: any(t.pid for t in runtime.jobs[other].tasks))
        assert len(launcher.launches) < 400
        runtime.cancel(big)
        wait("the big job to be cancelled", lambda: big not in runtime.jobs)
        spawned = len(launcher.launches)
        time.sleep(0.5)
        assert len(launcher.launches) == spawned < 300  # nothing spawned after the cancel
        row = store.job(big)
        assert row is not None and row["state"] == "Cancelled"
    finally:
        runtime.stop()
        store.close()
