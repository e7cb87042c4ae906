"""The runtime's side of the TrainingJob intake: what each observation changes.

`caldera.k8s.observe.intake.Intake` says what the TrainingJobs showed
(`caldera.k8s.observe.intakefacts`); `apply_intake` is the one place that changes the runtime's
jobs, the kernel, the room held by orphans and the actuator's queues for them. Nothing is
written to the cluster here: the statuses, removals and Events are queued for the step's flush.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from caldera.k8s.effects.guard import Purpose
from caldera.k8s.jobs import KubeJob
from caldera.k8s.observe.intakefacts import (
    IntakeObservation,
    JobAdmitted,
    JobGone,
    JobRefused,
    JobTakenBack,
    SettledSeen,
    SettledThere,
)
from caldera.k8s.reporting.events import Reason
from caldera.model import JobState
from caldera.runtime import EventKind

if TYPE_CHECKING:
    from caldera.k8s.runtime import KubeRuntime

__all__ = ["apply_intake"]

log = logging.getLogger("caldera.k8s")


def apply_intake(runtime: KubeRuntime, seen: IntakeObservation, now: float) -> None:
    """Carry out one observation of the intake on `runtime`."""
    actuator = runtime.actuator
    match seen:
        case JobAdmitted(job, held):
            if held is not None:
                job.hold_reason = held
                job.hold_since = now
            runtime.jobs[job.id] = job
            actuator.record(EventKind.SUBMIT, job, now, held=held)
            runtime.kernel.mark(job)
            runtime.cycle_needed = True
            spec = job.spec
            log.info(
                "admitted %s (%s, %s): %s", job.id, spec.type.value, spec.queue, job.state.value
            )
        case JobRefused(obj, reason):
            metadata = obj["metadata"]
            log.info("rejected %s/%s: %s", metadata["namespace"], metadata["name"], reason)
            actuator.reject(obj, reason, now)
        case JobTakenBack(job):
            try:
                _take_back(runtime, job, now)
            except Exception:  # one tenant's object never stops the rest (issue 34)
                log.exception("%s could not be taken back", job.id)
                runtime.jobs.pop(job.id, None)
                runtime.intake.unreadable.add((job.namespace, job.name))
        case JobGone(job):
            _forget(runtime, job)
        case SettledSeen(uid):
            actuator.settled.discard(uid)
        case SettledThere(uids):
            actuator.settled &= uids


def _take_back(runtime: KubeRuntime, job: KubeJob, now: float) -> None:
    """A job a previous controller was running: its pods' room is taken again; a gang that
    lost pods while nobody watched is settled (stopped and requeued)."""
    for task in job.tasks:
        runtime.take(job, task)
    runtime.jobs[job.id] = job
    runtime.kernel.stale.add(job.id)
    runtime.cycle_needed = True
    state = job.state
    log.info(
        "took back %s (%s, attempt %d, %d task(s) found, %d lost)",
        job.id,
        state.value,
        job.attempts,
        len(job.tasks),
        job.lost_tasks,
    )
    if job.lost_tasks and state is JobState.RUNNING:
        runtime.actuator.note(
            Reason.NOT_READY, job, now, f"{job.lost_tasks} pod(s) vanished while away"
        )
        runtime.settle(job)
    elif state in (JobState.RUNNING, JobState.RELEASING) and not job.tasks:
        runtime.settle(job)


def _forget(runtime: KubeRuntime, job: KubeJob) -> None:
    """The TrainingJob is gone (its owner deleted it): stop the pods (the garbage collector
    does too), keep their room until they are gone, drop the job."""
    log.info("%s was deleted: stopping its pods", job.id)
    for task in job.tasks:
        if task.done:
            runtime.actuator.give(job, [task])
            continue
        if task.counted:  # its room stays taken until the pod is gone
            runtime.orphans[(job.namespace, task.pod)] = task.placement
            task.counted = False
        runtime.actuator.remove(None, job.namespace, task.pod, runtime.grace, Purpose.CLEANUP)
    job.tasks = []
    del runtime.jobs[job.id]
    runtime.actuator.dirty.pop(job.id, None)
    runtime.kernel.stale.add(job.id)
    runtime.cycle_needed = True
