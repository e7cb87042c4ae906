"""The runtime's side of the pod watcher: what each observation changes.

`caldera.k8s.observe.pods.PodWatcher.observe` says what the pods showed
(`caldera.k8s.observe.podfacts`); `apply_pod` is the one place that changes the runtime's jobs,
the kernel, the room held by orphans and the actuator's queue for it, in the order the watcher
saw things. Nothing is written to the cluster here: removals and Events are queued for the
step's flush.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from caldera.k8s.effects.guard import Purpose
from caldera.k8s.observe.podfacts import (
    GangRunning,
    OrphanHeld,
    OrphanReleased,
    OrphanRemoved,
    PodObservation,
    Reported,
    Resend,
    StartGivenUp,
    StartHeld,
    StartReleased,
    StuckTerminating,
    TaskEnded,
    TaskSeen,
    TasksEnded,
)
from caldera.k8s.reporting.events import Reason
from caldera.model import JobState
from caldera.runtime import EventKind

if TYPE_CHECKING:
    from caldera.k8s.runtime import KubeRuntime

__all__ = ["apply_pod"]

log = logging.getLogger("caldera.k8s")


def apply_pod(runtime: KubeRuntime, seen: PodObservation, now: float) -> None:
    """Carry out one observation of the pod watcher on `runtime`."""
    actuator = runtime.actuator
    match seen:
        case TaskEnded(job, task, key, code, finished):
            actuator.expected.pop(key, None)
            task.done, task.exit_code = True, code
            if finished:
                task.finished = True
        case TaskSeen(job, task, key, bound, deleting):
            actuator.expected.pop(key, None)
            if bound and not task.bound:
                task.bound = True
                runtime.kernel.mark(job)
                runtime.pacing.bound(now - (job.start_time or now))
                if runtime.pacing.paced:  # room in the binder's queue for what waited
                    runtime.cycle_needed = True
            task.deleting = deleting
        case StuckTerminating():
            _stuck(runtime, seen, now)
        case Resend(job, task):
            task.resent = True
            purpose = Purpose.EVICT if task.leaving else Purpose.STOP
            actuator.remove(job, job.namespace, task.pod, runtime.grace, purpose)
        case Reported():
            _reported(runtime, seen, now)
        case GangRunning(job, since, pods):
            runtime.kernel.begin_progress(job, since)
            actuator.record(Reason.RUNNING, job, now, pods=pods)
        case TasksEnded(job, stuck):
            runtime.settle(job)
            for key, pod in stuck:  # its room is not free: held like an orphan's until gone
                runtime.hold_orphan(key, pod)
        case StartGivenUp(job, reason, late, message):
            log.warning("%s: %s; giving the start up", job.id, late)
            actuator.note(reason, job, now, message)
            runtime.stop_gang(job, now)
        case StartHeld(job, why):
            runtime.kernel.set_state(job, JobState.HELD)
            job.hold_reason = why
            job.hold_since = now
            actuator.record(EventKind.HOLD, job, now, reason=job.hold_reason)
        case StartReleased(job):
            job.hold_reason = job.hold_since = None
            runtime.kernel.set_state(job, JobState.PENDING)
            actuator.record(EventKind.RELEASE, job, now, reason="next try")
            runtime.cycle_needed = True
        case OrphanHeld(key, pod):
            runtime.hold_orphan(key, pod)
        case OrphanReleased(key):
            runtime.release_orphan(key)
        case OrphanRemoved(key, grace):
            runtime.remove_pod(None, key, grace, Purpose.CLEANUP)


def _stuck(runtime: KubeRuntime, seen: StuckTerminating, now: float) -> None:
    """Delete a pod stuck terminating again with grace 0, or move on without it."""
    job, task, over = seen.job, seen.task, seen.over
    actuator = runtime.actuator
    if not seen.give_up:
        task.forced = True
        actuator.remove(job, job.namespace, task.pod, 0, Purpose.FORCE)
        actuator.note(
            Reason.STUCK_TERMINATING,
            job,
            now,
            f"pod {task.pod} still terminating {over:.0f} s after its grace period: "
            "deleted with grace period 0",
        )
        return
    log.warning("%s: pod %s stuck terminating; moving on without it", job.id, task.pod)
    actuator.note(
        Reason.STUCK_TERMINATING,
        job,
        now,
        f"pod {task.pod} still there {over:.0f} s after its grace period (a finalizer?): "
        "the job moves on; the pod's room stays held until it is gone",
    )
    task.done, task.exit_code = True, None
    runtime.replan_around(job)


def _reported(runtime: KubeRuntime, seen: Reported, now: float) -> None:
    """Progress and checkpoints a job wrote on its own pod: a value it cannot use changes
    nothing and is said once, as a Warning Event (issue 34: `progress=nan` made a job immune
    to preemption)."""
    job = seen.job
    if seen.problem is not None and seen.problem != job.bad_report:
        job.bad_report = seen.problem
        log.warning("%s: pod %s: %s", job.id, seen.pod, seen.problem)
        runtime.actuator.note(Reason.BAD_REPORT, job, now, f"ignored: {seen.problem}")
    if seen.progress is not None and seen.progress != job.reported_progress:
        job.reported_progress = seen.progress
        runtime.kernel.mark(job)
    at = seen.checkpoint_at
    if at is not None and at > (job.checkpoint_seen or 0.0):
        job.checkpoint_seen = at
        job.saved_work = max(job.saved_work, job.work_done(min(at, now)))
        runtime.kernel.mark(job)
