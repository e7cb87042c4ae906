"""Phase 2, allocate: place whole gangs in free room.

Order:
  1. preemptors holding a nomination start on their promised room as soon as all of it is
     free (or on other free room); until then its free part is blocked for everyone else;
     then each queue's starving large job starts, or reserves room (core/reservation.py);
  2. queues by share (allocated / deserved, lowest first) — except that a queue whose next
     job is critical goes first: critical work is not held back by fairness;
  3. inside a queue: priority (high first), then submit time, then id.

May: take free room, start jobs, record which could not be placed — for want of room or of
their queue's capability — for preempt/reclaim.
May not: evict, exceed a queue's capability, start a gang with fewer or more than
`min_available` tasks (extra tasks of an elastic job are backfill's), or use room blocked for
a nomination.
Room only shrinks inside this phase, so a shape that failed once fails for the rest of it,
and a queue that hit its capability stays there: such a pending group is settled at once,
which keeps the phase's cost proportional to what starts, not to the backlog.
"""

from __future__ import annotations

import heapq

from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext, PendingGroup
from caldera.core.decisions import Nominate
from caldera.core.fairshare import lending_key
from caldera.core.packing import count_started, place_elsewhere, place_packed
from caldera.core.reservation import LARGE, reserve_for_starving
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView, Nomination
from caldera.model import CRITICAL_PRIORITY, Resources

__all__ = ["allocate", "job_order", "nomination_stale", "place_nominated", "placement_is_free"]


def job_order(job: JobView) -> tuple[int, float, str]:
    """Inside a queue: 1. priority, high first; 2. submit time; 3. id."""
    return job.spec.rank


def placement_is_free(room: Room, placement: tuple[TaskPlacement, ...]) -> bool:
    """Could `placement` be taken exactly as planned right now?"""
    need: dict[tuple[int, int], int] = {}
    cpu: dict[int, int] = {}
    memory: dict[int, int] = {}
    pods: dict[int, int] = {}
    for task in placement:
        for device in task.devices:
            need[(task.node, device)] = need.get((task.node, device), 0) + task.milli
        cpu[task.node] = cpu.get(task.node, 0) + task.cpu
        memory[task.node] = memory.get(task.node, 0) + task.memory
        pods[task.node] = pods.get(task.node, 0) + 1
    return (
        all(room.free[node][device] >= milli for (node, device), milli in need.items())
        and all(room.cpu[node] >= value for node, value in cpu.items())
        and all(room.memory[node] >= value for node, value in memory.items())
        and all(room.pods[node] >= value for node, value in pods.items())
    )


def nomination_stale(nomination: Nomination, config: PolicyConfig, now: float) -> bool:
    """Has a preemptor held its nomination longer than `nomination_timeout`? It then
    re-plans, once no victim of the plan is still releasing."""
    return now - nomination.since > config.nomination_timeout


def place_nominated(cycle: CycleContext, job: JobView) -> bool:
    """Start a nominated preemptor on its promised room, or block that room. True: handled.

    It starts once the room is free and its queue is within its capability — victims of its
    own queue, still releasing, may hold the quota it needs while its room is already free."""
    nomination = job.nomination
    assert nomination is not None
    # Its own gang is counted in `promised`: nothing more may be added.
    capped = not cycle.usage[job.spec.queue].within_capability(Resources())
    # Victims the eviction budget left to later cycles are part of the plan (a reclaimer's
    # own-queue victims keep its queue within its deserved share): it waits for them.
    waits = capped or bool(nomination.pending)
    if not waits and placement_is_free(cycle.room, nomination.placement):
        for task in nomination.placement:
            cycle.room.take(task)
        cycle.promise(job, -1)
        cycle.start(job, nomination.placement)
        cycle.decided.nominations.append(Nominate(job.id, None))
        return True
    stale = nomination_stale(nomination, cycle.config, cycle.now)
    victims_pending = any(
        (v := cycle.jobs.get(victim)) is not None and v.releasing for victim in nomination.victims
    )
    if stale and not victims_pending:
        cycle.promise(job, -1)
        cycle.decided.nominations.append(Nominate(job.id, None))
        cycle.decided.notes.append(f"{job.id}: nomination expired, re-planning")
        return False
    # Its gang at its minimum, as allocate starts every gang: only that much is promised
    # (counted against its queue's capability); extra tasks grow in backfill.
    elsewhere = None if waits else place_elsewhere(cycle, job.spec)
    if elsewhere is not None:
        cycle.promise(job, -1)
        cycle.start(job, elsewhere)
        cycle.decided.nominations.append(Nominate(job.id, None))
        return True
    cycle.block(job.id, nomination.placement)
    return True


_STARTED, _WAITING, _CAPPED = range(3)


def _place_nominated(cycle: CycleContext) -> set[str]:
    """Before anything else is placed: nominated preemptors start or block their room."""
    eligible_queues = {key[0] for key, _ in cycle.eligible_groups}
    handled: set[str] = set()
    nominated = sorted(
        (j for j in cycle.snapshot.job_index.nominated.values() if j.spec.queue in eligible_queues),
        key=job_order,
    )
    for job in nominated:
        if place_nominated(cycle, job):
            handled.add(job.id)
    return handled


def allocate(cycle: CycleContext) -> None:
    room = cycle.room
    handled: set[str] = cycle.memo("nominated_handled", lambda: _place_nominated(cycle))
    if cycle.in_pass(("", LARGE, 0)):
        # Starving large jobs start, or reserve room, before anybody else is placed.
        handled = handled | cycle.memo("starving_handled", lambda: reserve_for_starving(cycle))

    # Per queue, a heap of its groups' next jobs: (rank, group number, position).
    usage, in_pass = cycle.usage, cycle.pass_filter
    groups: list[PendingGroup] = [
        g for g in cycle.eligible_groups if g[0][0] in usage and (in_pass is None or in_pass(g[0]))
    ]
    heads: dict[str, list[tuple[tuple[int, float, str], int, int]]] = {}
    for number, (key, jobs) in enumerate(groups):
        heads.setdefault(key[0], []).append((jobs[0].spec.rank, number, 0))
    for queue_heads in heads.values():
        heapq.heapify(queue_heads)

    # Lowest department share, then lowest share (a flat list: each queue is its department).
    decayed = cycle.snapshot.decayed_usage if cycle.config.fair_share_half_life > 0 else {}
    queues = [
        (_band(heads[name][0][0]), *lending_key(usage[name], decayed), name) for name in heads
    ]
    heapq.heapify(queues)
    failed: set[int] = set()
    waiting = cycle.waiting
    while queues:
        head_band, tree_share, share, name = heapq.heappop(queues)
        entry = usage[name]
        if entry.parent is not None and lending_key(entry, decayed) > (tree_share, share):
            # A sibling started since this key was made: its department's share rose.
            heapq.heappush(queues, (head_band, *lending_key(entry, decayed), name))
            continue
        queue_heads = heads[name]
        # A queue's share changes only when one of its jobs starts: until then it stays the
        # lowest, so keep taking its jobs without going back through the queue heap.
        while queue_heads and _band(queue_heads[0][0]) == head_band:
            _, number, position = heapq.heappop(queue_heads)
            jobs = groups[number][1]
            job = jobs[position]
            if job.id in handled:
                outcome = _STARTED
            elif cycle.out_of_starts(job.spec.priority):
                return  # paced (`Snapshot.start_budget`): the rest wait for the next cycle
            elif job.spec.shape in failed:
                outcome = _WAITING  # as _try_allocate: _CAPPED or _WAITING, settled alike
            else:
                outcome = _try_allocate(cycle, room, job, failed)
            if outcome != _STARTED:
                # Did not fit, or its queue's capability stands in the way: either way the
                # group is settled here, and preempt may free room or quota for it.
                waiting.append((groups[number], position))
                continue
            if position + 1 < len(jobs):
                heapq.heappush(queue_heads, (jobs[position + 1].spec.rank, number, position + 1))
            if job.id not in handled:
                break
        if queue_heads:
            heapq.heappush(queues, (_band(queue_heads[0][0]), *lending_key(entry, decayed), name))


def _band(rank: tuple[int, float, str]) -> int:
    """A queue's band by its next job's rank: critical jobs (0) before everyone else (1)."""
    return 0 if -rank[0] >= CRITICAL_PRIORITY else 1


def _try_allocate(cycle: CycleContext, room: Room, job: JobView, failed: set[int]) -> int:
    """Place one job if it fits: _STARTED, _WAITING (did not fit) or _CAPPED (quota)."""
    usage = cycle.usage[job.spec.queue]
    if not usage.within_capability(job.spec.gang_request) or not cycle.may_return(job):
        return _CAPPED
    shape = job.spec.shape
    if shape in failed:
        return _WAITING
    # The gang at its minimum: extra tasks grow in backfill, once every queue's pending jobs
    # had their turn (an elastic job must not hold room another queue deserves).
    placement = place_packed(cycle, job.spec)  # packing.py: plain binpacking for most jobs
    if placement is None:
        failed.add(shape)
        return _WAITING
    cycle.start(job, placement)
    count_started(cycle, job.spec, placement)
    return _STARTED
