"""Phase 1, enqueue: which jobs may be scheduled this cycle.

May: admit Pending jobs of Open/Closing queues that are inside their time window; hold Pending
jobs whose window closed and release window-held jobs whose window opened; evict running jobs
of a queue whose window closed (gracefully, never critical or protected work).
May not: place anything, or touch a Closed queue's pending jobs (they wait) or running jobs.
Decisions are per pending group (one queue, priority and shape): its jobs share every
criterion enqueue looks at.
"""

from __future__ import annotations

from caldera.core.context import CycleContext
from caldera.core.decisions import Evict, EvictReason, Hold, Release
from caldera.core.victims import is_protected
from caldera.model import JobState, QueueState

__all__ = ["enqueue"]


def _has_jobs(cycle: CycleContext, queue: str) -> bool:
    """Does the queue hold, run or wait for anything?"""
    index = cycle.snapshot.job_index
    held = index.usage.get(queue)
    if held is not None and any(held[:3]):
        return True
    if any(key[0] == queue for key in index.pending):
        return True
    return any(job.spec.queue == queue for job in index.by_state[JobState.HELD].values())


def enqueue(cycle: CycleContext) -> None:
    now = cycle.now
    week_time = now + cycle.config.week_offset
    queues = cycle.snapshot.queues
    index = cycle.snapshot.job_index
    for windowed in queues.values():
        # Only a queue with jobs cares when its window opens or closes; asking for every
        # edge regardless would keep an idle simulation running forever.
        if windowed.time_windows and _has_jobs(cycle, windowed.name):
            edge = windowed.next_window_edge(week_time)
            if edge is not None:
                cycle.decided.wakeups.append(edge - cycle.config.week_offset)
    windows = {name: queue.in_window(week_time) for name, queue in queues.items()}
    for job in index.by_state[JobState.HELD].values():
        if job.hold_reason == "window" and windows.get(job.spec.queue, False):
            cycle.decided.releases.append(Release(job.id, "window"))
    for key, jobs in index.pending.items():
        queue = queues.get(key[0])
        if queue is None or queue.state is QueueState.CLOSED:
            continue
        if not windows[queue.name]:
            cycle.decided.holds.extend(
                Hold(job.id, "window") for job in jobs if job.nomination is None
            )
            continue
        capability = queue.capability
        if capability is not None and not jobs[0].spec.gang_request.fits_in(capability):
            continue
        cycle.eligible_groups.append((key, jobs))
    if all(windows.values()):
        return
    for job in index.by_state[JobState.RUNNING].values():
        if not windows.get(job.spec.queue, True) and not is_protected(job):
            gpu = job.spec.gpu * len(job.placement)
            cycle.evict(Evict(job.id, EvictReason.WINDOW, None, (), gpu), job)
