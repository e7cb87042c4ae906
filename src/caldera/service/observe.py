"""Looking at this host's processes: what the service's runtime learns each turn, as typed
observations (nothing here changes a job).

- `Exited`: a task's process group is gone (its exit code, None if nobody saw it; the
  reason, when the kernel killed it at its memory limit);
- `KillDue`: a leaving or stopping task outlived its grace period;
- `Reported`: progress or a checkpoint the job wrote through `caldera.sdk.preemption`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from caldera.model import JobState
from caldera.service.jobs import LiveJob, TaskRun
from caldera.service.launcher import JobFiles, Launcher, end_reason
from caldera.service.procs import read_report

__all__ = ["Exited", "KillDue", "Observation", "Reported", "observe"]


@dataclass(frozen=True, slots=True)
class Exited:
    job: LiveJob
    task: TaskRun
    exit_code: int | None
    reason: str | None = None  # `out of memory (limit …)`


@dataclass(frozen=True, slots=True)
class KillDue:
    job: LiveJob
    task: TaskRun


@dataclass(frozen=True, slots=True)
class Reported:
    """`progress` in [0, 1] and/or a checkpoint written at `checkpoint_at` (its `step`)."""

    job: LiveJob
    progress: float | None = None
    checkpoint_at: float | None = None
    step: int | None = None


Observation = Exited | KillDue | Reported


def observe(
    jobs: Iterable[LiveJob], launcher: Launcher, data_dir: Path, now: float
) -> Iterator[Observation]:
    """What changed for the jobs holding tasks: exits, SIGKILL deadlines, reports."""
    for job in jobs:
        files = JobFiles(data_dir, job.id)
        for task in job.tasks:
            if task.done or task.pid is None:
                continue  # ended, or spawned in this very flush: looked at next turn
            over, code = launcher.ended(files, task.attempt, task.rank, task.pid, task.start_ticks)
            if over:
                yield Exited(job, task, code, end_reason(files, task.attempt, task.rank))
            elif task.kill_at is not None and now >= task.kill_at and not task.killed:
                yield KillDue(job, task)
        if job.state in (JobState.RUNNING, JobState.RELEASING):
            yield from _reports(job, files)


def _reports(job: LiveJob, files: JobFiles) -> Iterator[Reported]:
    """The status files the job's tasks wrote since the last look: each task's own file,
    looked up by name and read safely (`procs.read_report`), never a scan of a folder the
    job fills."""
    for rank in sorted({t.rank for t in job.tasks}):
        path = files.report(rank)
        found = read_report(path, job.control_seen.get(path.name))
        if found is None:
            continue
        job.control_seen[path.name], report = found
        checkpoint = report.get("checkpoint")
        yield Reported(
            job,
            progress=report.get("progress"),
            checkpoint_at=checkpoint["time"] if checkpoint else None,
            step=checkpoint["step"] if checkpoint else None,
        )
