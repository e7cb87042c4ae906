"""Phase 2, allocate: place whole gangs in free room.

Order:
  1. preemptors holding a nomination start on their promised room as soon as all of it is
     free; until then its free part is blocked for everyone else;
  2. queues by share (allocated / deserved, lowest first) — except that a queue whose next
     job is critical goes first: critical work is not held back by fairness;
  3. inside a queue: priority (high first), then submit time, then id.

May: take free room, start jobs, remember which could not be placed (for preempt/reclaim).
May not: evict, exceed a queue's capability, start a gang with fewer than `min_available`
tasks, or use room blocked for a nomination.
Placement failure is monotone inside this phase (room only shrinks), so a task shape that
failed once is not tried again.
"""

from __future__ import annotations

import heapq
from collections import deque

from caldera.core.context import CycleContext, shape_key
from caldera.core.decisions import Nominate
from caldera.core.placement import place_job
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.model import CRITICAL_PRIORITY

__all__ = ["allocate", "job_order", "place_nominated", "placement_is_free"]


def job_order(job: JobView) -> tuple[int, float, str]:
    """Inside a queue: 1. priority, high first; 2. submit time; 3. id."""
    return job.spec.rank


def placement_is_free(room: Room, placement: tuple[TaskPlacement, ...]) -> bool:
    """Could `placement` be taken exactly as planned right now?"""
    need: dict[tuple[int, int], int] = {}
    cpu: dict[int, int] = {}
    memory: dict[int, int] = {}
    for task in placement:
        for device in task.devices:
            need[(task.node, device)] = need.get((task.node, device), 0) + task.milli
        cpu[task.node] = cpu.get(task.node, 0) + task.cpu
        memory[task.node] = memory.get(task.node, 0) + task.memory
    return (
        all(room.free[node][device] >= milli for (node, device), milli in need.items())
        and all(room.cpu[node] >= value for node, value in cpu.items())
        and all(room.memory[node] >= value for node, value in memory.items())
    )


def place_nominated(cycle: CycleContext, job: JobView) -> bool:
    """Start a nominated preemptor on its promised room, or block that room. True: started."""
    nomination = job.nomination
    assert nomination is not None
    if placement_is_free(cycle.room, nomination.placement):
        for task in nomination.placement:
            cycle.room.take(task)
        cycle.start(job, nomination.placement)
        cycle.nominations.append(Nominate(job.id, None))
        return True
    stale = cycle.now - nomination.since > cycle.config.nomination_timeout
    victims_pending = any(
        (v := cycle.jobs.get(victim)) is not None and v.releasing for victim in nomination.victims
    )
    if stale and not victims_pending:
        cycle.nominations.append(Nominate(job.id, None))
        cycle.notes.append(f"{job.id}: nomination expired, re-planning")
        return False
    elsewhere = place_job(cycle.room, job.spec)
    if elsewhere is not None:
        cycle.start(job, elsewhere)
        cycle.nominations.append(Nominate(job.id, None))
        return True
    cycle.block(job.id, nomination.placement)
    return True


def allocate(cycle: CycleContext) -> None:
    room = cycle.room
    free_agents: list[JobView] = []
    for job in cycle.memo("eligible_in_order", lambda: sorted(cycle.eligible, key=job_order)):
        if job.nomination is not None and place_nominated(cycle, job):
            continue
        free_agents.append(job)

    per_queue: dict[str, deque[JobView]] = {}
    for job in free_agents:
        if job.spec.queue in cycle.usage:
            per_queue.setdefault(job.spec.queue, deque()).append(job)

    def band(job: JobView) -> int:
        return 0 if job.spec.priority >= CRITICAL_PRIORITY else 1

    heap = [(band(jobs[0]), cycle.usage[name].share, name) for name, jobs in per_queue.items()]
    heapq.heapify(heap)
    failed: set[int] = set()
    while heap:
        head_band, _, name = heapq.heappop(heap)
        jobs = per_queue[name]
        # A queue's share changes only when one of its jobs starts: until then it stays the
        # lowest, so keep taking its jobs without going back through the heap.
        while jobs and band(jobs[0]) == head_band:
            if _try_allocate(cycle, room, jobs.popleft(), failed):
                break
        if jobs:
            heapq.heappush(heap, (band(jobs[0]), cycle.usage[name].share, name))


def _try_allocate(cycle: CycleContext, room: Room, job: JobView, failed: set[int]) -> bool:
    """Place one job if it fits; True when it started."""
    usage = cycle.usage[job.spec.queue]
    if not usage.within_capability(job.spec.gang_request):
        return False
    key = shape_key(job)
    if key in failed:
        cycle.unplaced.append(job)
        return False
    placement = place_job(room, job.spec)
    if placement is None:
        failed.add(key)
        cycle.unplaced.append(job)
        return False
    if len(placement) > job.spec.min_available and not usage.within_capability(
        job.spec.task_request.scaled(len(placement))
    ):
        # Extra elastic tasks would break the cap: keep only the gang.
        for task in placement[job.spec.min_available :]:
            room.give(task)
        placement = placement[: job.spec.min_available]
    cycle.start(job, placement)
    return True
