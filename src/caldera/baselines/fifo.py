"""`fifo`: what a cluster without a batch scheduler's preemption gets (BASELINES.md, `fifo`).

Rules, as BASELINES.md states them ("queue order by share, jobs by submit time, gangs
all-or-nothing, no preemption, no reclaim"):
  F1. Queues by share — allocated / deserved, lowest first — recomputed as jobs start.
  F2. Inside a queue, jobs by submit time, then id. Priority plays no part.
  F3. Gangs all-or-nothing: a job starts only with at least `min_available` tasks placed at
      once (topology honoured, binpacked). A job that does not fit is passed over, not waited
      for: like kube-scheduler and Volcano's allocate, nothing blocks the line.
  F4. No preemption, no reclaim: nothing is ever evicted to make room for another job.
Pods missing from a running job (an elastic job's tasks above `min_available`) are placed
when room appears, in the same order.

Phases: the platform's `enqueue` (queue state, time windows, capability — the same for every
policy), then `fifo_allocate`.
"""

from __future__ import annotations

import heapq
from collections import deque

from caldera.baselines.common import baseline_defaults, domain_of, missing_tasks, pending_work
from caldera.core.context import CycleContext
from caldera.core.enqueue import enqueue
from caldera.core.placement import place_job
from caldera.core.policy import Policy
from caldera.core.snapshot import JobView
from caldera.model import JobState

__all__ = ["FIFO", "arrival", "fifo_allocate", "start_or_grow"]


def arrival(job: JobView) -> tuple[float, str]:
    """F2: 1. submit time (a requeued job keeps its original one); 2. id."""
    return (job.spec.submit, job.id)


def fifo_allocate(cycle: CycleContext) -> None:
    """F1–F4: start what fits, queue by queue in share order, jobs by arrival; never evict."""
    per_queue: dict[str, deque[JobView]] = {}
    for job in sorted(pending_work(cycle), key=arrival):
        if job.spec.queue in cycle.usage:
            per_queue.setdefault(job.spec.queue, deque()).append(job)
    heap = [(cycle.usage[name].share, name) for name in per_queue]
    heapq.heapify(heap)
    failed: set[int] = set()
    while heap:
        _, name = heapq.heappop(heap)
        jobs = per_queue[name]
        # The share changes only when a job of this queue starts; until then it stays lowest.
        while jobs:
            if start_or_grow(cycle, jobs.popleft(), failed):
                break
        if jobs:
            heapq.heappush(heap, (cycle.usage[name].share, name))


def start_or_grow(cycle: CycleContext, job: JobView, failed: set[int]) -> bool:
    """Start a pending gang all-or-nothing (F3), or add missing pods to a running job.

    Never past the queue's capability. True when something started. A pending job's shape
    that failed to fit is remembered in `failed`: room only shrinks while allocating.
    """
    spec = job.spec
    usage = cycle.usage[spec.queue]
    room = cycle.room
    if job.state is JobState.RUNNING:
        want = missing_tasks(job)
        while want and not usage.within_capability(spec.task_request.scaled(want)):
            want -= 1
        if not want:
            return False
        within = domain_of(room, spec, job.placement[0].node) if job.placement else None
        extra = place_job(room, spec, minimum=1, maximum=want, within=within)
        if extra is None:
            cycle.unplaced.append(job)
            return False
        cycle.start(job, extra, grow=True)
        return True
    if not usage.within_capability(spec.gang_request) or spec.shape in failed:
        cycle.unplaced.append(job)
        return False
    placement = place_job(room, spec)
    if placement is None:
        failed.add(spec.shape)
        cycle.unplaced.append(job)
        return False
    keep = len(placement)
    while keep > spec.min_available and not usage.within_capability(spec.task_request.scaled(keep)):
        keep -= 1
    for task in placement[keep:]:  # elastic tasks beyond the capability go back
        room.give(task)
    cycle.start(job, placement[:keep])
    return True


FIFO = Policy(
    name="fifo",
    phases=(enqueue, fifo_allocate),
    description="queues by share, jobs by submit time, whole gangs, no preemption",
    defaults=baseline_defaults,
)
