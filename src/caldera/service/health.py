"""What a drained GPU means for the jobs on it, as typed intents the runtime carries out.

`caldera.service.gpus` decides which devices are drained and why (`Drain`); this module
decides, without side effects, what follows for the live jobs (`drain_intents`):

- a running job with tasks on a drained device gets an `Evict` (reason HEALTH) — only the
  tasks on the device if the gang can do without them, else the whole job — with no grace
  period when the GPU is lost (fatal) and the policy's grace period otherwise;
- a job already releasing whose leaving tasks sit on a lost GPU does not wait out its
  grace period: those tasks are killed now (`KillNow`).

The runtime applies the evictions through the kernel (`Kernel.evict`) like any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from caldera.core import Evict, EvictReason
from caldera.model import JobState
from caldera.service.gpus.watch import Drain, GpuWatch
from caldera.service.jobs import LiveJob, TaskRun

__all__ = ["DrainEvict", "KillNow", "drain_intents"]


@dataclass(frozen=True, slots=True)
class DrainEvict:
    """Evict (part of) `job` because of a drained GPU; SIGKILL after `grace` seconds."""

    job: LiveJob
    evict: Evict
    grace: float
    detail: dict[str, str]


@dataclass(frozen=True, slots=True)
class KillNow:
    """A leaving task on a lost GPU: its SIGKILL deadline is now."""

    task: TaskRun


def drain_intents(
    drain: Drain, jobs: Iterable[LiveJob], grace_period: float, now: float
) -> list[DrainEvict | KillNow]:
    """What `drain` asks of `jobs` (the jobs holding devices), in the jobs' order."""
    finding = drain.finding
    detail = {"gpu": finding.uuid, "gpu_reason": finding.reason}
    drained = set(drain.devices)
    intents: list[DrainEvict | KillNow] = []
    for job in jobs:
        if job.state is JobState.RELEASING and drain.fatal:
            intents.extend(
                KillNow(task)
                for task in job.tasks
                if drained.intersection(task.placement.devices) and not task.done
            )
            continue
        if job.state is not JobState.RUNNING:
            continue
        hit = GpuWatch.tasks_on([t.placement for t in job.running], drain.devices)
        if not hit:
            continue
        # Only the tasks on the sick GPU leave, if the gang can do without them.
        tasks = tuple(hit) if len(job.running) - len(hit) >= job.spec.min_available else ()
        grace = 0.0 if drain.fatal else grace_period
        evict = Evict(job.id, EvictReason.HEALTH, None, tasks, 0, now + grace)
        intents.append(DrainEvict(job, evict, grace, detail))
    return intents
