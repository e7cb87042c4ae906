"""Phase 1, enqueue: which jobs may be scheduled this cycle.

May: admit Pending jobs of Open/Closing queues that are inside their time window; hold Pending
jobs whose window closed and release window-held jobs whose window opened; evict running jobs
of a queue whose window closed (gracefully, never critical or protected work).
May not: place anything, or touch a Closed queue's pending jobs (they wait) or running jobs.
"""

from __future__ import annotations

from caldera.core.context import CycleContext
from caldera.core.decisions import Evict, EvictReason, Hold, Release
from caldera.core.victims import is_protected
from caldera.model import JobState, QueueState

__all__ = ["enqueue"]


def enqueue(cycle: CycleContext) -> None:
    now = cycle.now
    week_time = now + cycle.config.week_offset
    queues = cycle.snapshot.queues
    for windowed in queues.values():
        edge = windowed.next_window_edge(week_time)
        if edge is not None:
            cycle.wakeups.append(edge - cycle.config.week_offset)
    windows = {name: queue.in_window(week_time) for name, queue in queues.items()}
    by_state = cycle.snapshot.by_state
    for job in by_state[JobState.HELD]:
        if job.hold_reason == "window" and windows.get(job.spec.queue, False):
            cycle.releases.append(Release(job.id, "window"))
    for job in by_state[JobState.PENDING]:
        queue = queues.get(job.spec.queue)
        if queue is None or queue.state is QueueState.CLOSED:
            continue
        if not windows[queue.name]:
            if job.nomination is None:
                cycle.holds.append(Hold(job.id, "window"))
            continue
        if queue.capability is not None and not job.spec.gang_request.fits_in(queue.capability):
            continue
        cycle.eligible.append(job)
    if all(windows.values()):
        return
    for job in by_state[JobState.RUNNING]:
        if not windows.get(job.spec.queue, True) and not is_protected(job):
            gpu = job.spec.gpu * len(job.placement)
            cycle.evict(Evict(job.id, EvictReason.WINDOW, None, (), gpu), job)
