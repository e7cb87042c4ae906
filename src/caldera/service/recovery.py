"""Taking over after a restart: the service rebuilds its memory from the database and
adopts the task processes that are still running (tasks outlive their server by design).

A task committed but never spawned (the server died in between) has ended unseen; a record
whose room another record already claims is stopped rather than let a GPU be used twice;
what the previous server left half-done is settled by the kernel like any other task end.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import replace
from typing import TYPE_CHECKING

from caldera.core import Throttle
from caldera.model import JobState, QueueState
from caldera.service.jobs import LiveJob
from caldera.service.launcher import JobFiles

if TYPE_CHECKING:
    from caldera.service.runtime import Runtime

__all__ = ["recover"]

log = logging.getLogger("caldera.service")


def recover(runtime: Runtime) -> None:
    """Rebuild memory from the database and adopt the processes that are still ours."""
    with runtime.lock:
        for name, state in runtime.store.queue_states().items():
            if name in runtime.queues:
                runtime.queues[name] = replace(runtime.queues[name], state=QueueState(state))
        for row in runtime.store.throttles():
            runtime.throttles[row["queue"]] = Throttle(row["queue"], row["job"], row["since"])
        now = runtime.clock()
        adopted = 0
        for row in runtime.store.active_jobs():
            job = LiveJob.from_row(row)
            runtime.jobs[job.id] = job
            adopted += _adopt(runtime, job)
            runtime.kernel.mark(job)
            if job.state is JobState.RUNNING and not job.tasks:
                runtime.kernel.requeue(job, now, "lost")
            if job.tasks and job.state in (JobState.RUNNING, JobState.RELEASING):
                runtime.actuator.note(now, "adopt", job.id, tasks=len(job.tasks))
        for job in list(runtime.jobs.values()):
            if any(t.done for t in job.tasks):
                runtime.settle(job, now)
        runtime.kernel.stats.throttle_held_seconds = sum(
            float((e.get("data") or {}).get("held", 0.0))
            for e in runtime.store.events_of_kind("release")
            if (e.get("data") or {}).get("reason") == "throttle"
        )
        runtime.actuator.flush()
        if adopted:
            log.info("adopted %d running task(s) from the previous server", adopted)


def _adopt(runtime: Runtime, job: LiveJob) -> int:
    """Take back a job's processes and room; returns how many tasks are still running."""
    files = JobFiles(runtime.data_dir, job.id)
    adopted = 0
    for task in job.tasks:
        if task.done:
            continue
        if task.pid is None:
            recorded = runtime.launcher.recorded(files, task.attempt, task.rank)
            if recorded is None:
                # Committed but never spawned: the server died in between.
                task.done = True
                task.exit_code = None
                continue
            task.pid, task.start_ticks = recorded
        adopted += 1
    job.forget_unrun_work()
    for task in list(job.tasks):
        if runtime.room.can_take(task.placement):
            runtime.room.take(task.placement)
            continue
        # Two records claim one device: stop this one rather than let a GPU be used
        # twice, and forget it (its room belongs to the other).
        log.error("job %s task %d overlaps another; stopping it", job.id, task.rank)
        if not task.done:
            runtime.actuator.send(task, signal.SIGKILL)
        job.tasks.remove(task)
        job.exit_code = job.exit_code if task.leaving else None
    return adopted
