"""What the loop does with what it saw of the processes: one poll, applied.

`caldera.service.observe` looks at the busy tasks and says what it saw, without changing
anything: a task exited (and how, an out-of-memory kill included), a SIGKILL deadline
passed, a job reported progress or a checkpoint through `caldera.sdk.preemption`. `poll`
applies each observation to the job it names: exits mark the task done and the job is
settled through the kernel, a deadline sends SIGKILL, a report moves the job's reported
progress and saved work. It also integrates the allocated and gang-hang GPU time since the
last poll, for /metrics. The caller (the runtime's loop) holds the runtime lock.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from caldera.model import JobState
from caldera.service.jobs import LiveJob
from caldera.service.observe import Exited, KillDue, Reported, observe

if TYPE_CHECKING:
    from caldera.service.runtime import Runtime

__all__ = ["poll"]


def poll(runtime: Runtime, now: float) -> None:
    """Exits, SIGKILL deadlines and the jobs' reports (caller holds the lock)."""
    _integrate(runtime, now)
    actuator = runtime.actuator
    busy = list(actuator.holding.values())
    ended: dict[str, LiveJob] = {}
    out_of_memory: set[str] = set()
    for seen in observe(busy, runtime.launcher, runtime.data_dir, now):
        job = seen.job
        if isinstance(seen, Exited):
            seen.task.done = True
            seen.task.exit_code = seen.exit_code
            ended[job.id] = job
            if seen.reason is not None:  # the job fails for this reason, or is retried
                job.reason = seen.reason
                out_of_memory.add(job.id)
                actuator.note(now, "oom", job.id, task=seen.task.rank, reason=seen.reason)
        elif isinstance(seen, KillDue):
            seen.task.killed = True
            actuator.send(seen.task, signal.SIGKILL)
        else:
            _reported(runtime, seen, now)
        runtime.kernel.mark(job)
    for job in ended.values():
        runtime.settle(job, now)
        if job.id in out_of_memory and job.state is JobState.PENDING:
            job.reason = None  # retried: the oom event keeps what happened to that attempt
            runtime.kernel.mark(job)


def _integrate(runtime: Runtime, now: float) -> None:
    """Allocated and gang-hang GPU time since the last look (for /metrics)."""
    room = runtime.room
    allocated = room.capacity_milli - sum(sum(f) for f in room.free)
    if runtime.gpu_watch is not None:
        allocated -= runtime.gpu_watch.held_milli  # drained, not allocated
    runtime.stats.integrate(now, allocated, runtime.actuator.holding.values())


def _reported(runtime: Runtime, seen: Reported, now: float) -> None:
    """Progress and checkpoints a job reported through `caldera.sdk.preemption`."""
    job = seen.job
    if seen.progress is not None and seen.progress != job.reported_progress:
        job.reported_progress = seen.progress
    at = seen.checkpoint_at
    if at is None or at <= (job.checkpoint_seen or 0.0):
        return
    job.checkpoint_seen = at
    job.checkpoint_step = seen.step if seen.step is not None else job.checkpoint_step
    job.saved_work = max(job.saved_work, job.work_done(min(at, now)))
    kind = "sigterm" if job.state is JobState.RELEASING else "periodic"
    runtime.actuator.note(now, "checkpoint", job.id, reason=kind, step=job.checkpoint_step)
