"""Phase 6, throttle: the queue waiting mode that keeps freed room for a starving large job.

When a large job's first allocation fails, its queue enters waiting mode: the platform layer
holds new submissions below priority 800 to that queue (see `admission`). Waiting mode ends
when the large job runs, when it is gone, or after `throttle_timeout`; the jobs held for it
are then released in submission order.
"""

from __future__ import annotations

from collections.abc import Collection

from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext
from caldera.core.decisions import Release, ThrottleOff, ThrottleOn
from caldera.core.jobindex import may_throttle
from caldera.core.snapshot import JobView, Throttle
from caldera.model import PRIORITY_CLASSES, JobState, JobType

__all__ = ["may_throttle", "throttle", "waiting_mode_ends"]


def waiting_mode_ends(
    waiting: Throttle,
    job: JobView | None,
    config: PolicyConfig,
    now: float,
    started: Collection[str] = (),
) -> str | None:
    """Why a queue's waiting mode ends now — its large job `job` is gone or started (also
    this cycle: `started`), or the mode timed out — or None while it holds."""
    if job is None or job.state not in (JobState.PENDING, JobState.HELD):
        return "gone" if job is None else "started"
    if waiting.job in started:
        return "started"
    if now >= waiting.since + config.throttle_timeout:
        return "timeout"
    return None


def throttle(cycle: CycleContext) -> None:
    config = cycle.config
    ending: list[str] = []
    for queue, waiting in cycle.snapshot.throttles.items():
        reason = waiting_mode_ends(
            waiting, cycle.jobs.get(waiting.job), config, cycle.now, cycle.decided.started
        )
        if reason is None:
            cycle.decided.wakeups.append(waiting.since + config.throttle_timeout)
            continue
        cycle.decided.throttles.append(ThrottleOff(queue, reason))
        ending.append(queue)
    if ending:
        held = sorted(
            (
                job
                for job in cycle.snapshot.in_state(JobState.HELD)
                if job.hold_reason == "throttle" and job.spec.queue in ending
            ),
            key=lambda job: (job.spec.submit, job.id),
        )
        cycle.decided.releases.extend(Release(job.id, "throttle") for job in held)
    if not config.throttle:
        return
    waiting_queues = set(cycle.snapshot.throttles) - set(ending)
    large = PRIORITY_CLASSES[JobType.LARGE].value
    throttling = cycle.snapshot.job_index.throttling
    for (key, jobs), first in cycle.waiting:
        queue, priority, _ = key
        if priority != large or queue in waiting_queues or key not in throttling:
            continue
        for job in jobs[first:]:
            if may_throttle(job) and job.id not in cycle.decided.started:
                cycle.decided.throttles.append(ThrottleOn(queue, job.id))
                cycle.decided.wakeups.append(cycle.now + config.throttle_timeout)
                waiting_queues.add(queue)
                break
