"""Phase 5, backfill: use room that is left without delaying anyone who holds a reservation.

May: add the extra tasks of running elastic jobs (tasks above `min_available`), binpacked, as
far as their queue's capability allows; start a pending job inside room reserved for a
preemptor only if its expected duration ends before that room is needed (all victims gone).
May not: touch room reserved for a preemptor otherwise, or evict.
"""

from __future__ import annotations

from caldera.core.allocate import job_order
from caldera.core.context import CycleContext
from caldera.core.placement import place_job
from caldera.core.room import TaskPlacement
from caldera.core.snapshot import JobView
from caldera.model import JobState

__all__ = ["backfill"]


def backfill(cycle: CycleContext) -> None:
    _grow_elastic(cycle)
    _fill_reserved_room(cycle)


def _grow_elastic(cycle: CycleContext) -> None:
    growing = [
        job
        for job in cycle.snapshot.job_index.growable.values()
        if job.id not in cycle.evicted and job.state is JobState.RUNNING
    ]
    for job in sorted(growing, key=job_order):
        usage = cycle.usage.get(job.spec.queue)
        if usage is None:
            continue
        want = job.spec.tasks - len(job.placement)
        while want and not usage.within_capability(job.spec.task_request.scaled(want)):
            want -= 1
        if not want:
            continue
        nodes = _nodes_of(cycle, job)
        extra = place_job(cycle.room, job.spec, minimum=1, maximum=want, within=nodes)
        if extra is not None:
            cycle.start(job, extra, grow=True)


def _nodes_of(cycle: CycleContext, job: JobView) -> tuple[int, ...] | None:
    """Hard topology keeps extra tasks inside the domain the job already runs in."""
    topology = job.spec.topology
    if topology is None or topology.mode.value != "hard" or not job.placement:
        return None
    room = cycle.room
    first = room.nodes[job.placement[0].node]
    if topology.highest_tier <= 1:
        return tuple(room.tier1_nodes[first.tier1])
    return tuple(room.tier2_nodes[first.tier2])


def _ready_at(cycle: CycleContext, preemptor: JobView) -> float | None:
    """When the last victim of this preemptor's plan releases its room (None: unknown)."""
    nomination = preemptor.nomination
    victims = nomination.victims if nomination else ()
    if not victims:
        victims = tuple(e.job for e in cycle.evictions if e.preemptor == preemptor.id)
    if nomination is not None and nomination.pending:
        return None
    latest = cycle.now
    for victim_id in victims:
        victim = cycle.jobs.get(victim_id)
        if victim is None:
            continue
        if victim_id in cycle.evicted:
            latest = max(latest, cycle.now + cycle.config.grace_period)
        elif victim.release_at is not None:
            latest = max(latest, victim.release_at)
    return latest


def _fill_reserved_room(cycle: CycleContext) -> None:
    if not cycle.blocked:
        return
    windows: dict[str, float] = {}
    for holder in cycle.blocked:
        preemptor = cycle.jobs.get(holder)
        ready = None if preemptor is None else _ready_at(cycle, preemptor)
        if ready is not None and ready > cycle.now:
            windows[holder] = ready - cycle.now
    if not windows:
        return
    longest = max(windows.values())
    fillers = sorted(
        (
            job
            for job in cycle.waiting_jobs()
            if job.spec.expected_duration is not None
            and job.spec.expected_duration <= longest
            and job.id not in cycle.started
            and job.id not in cycle.blocked
        ),
        key=job_order,
    )
    for holder, window in windows.items():
        parts = cycle.blocked[holder]
        nodes = tuple(dict.fromkeys(p.node for p in parts))
        for job in fillers:
            expected = job.spec.expected_duration
            if job.id in cycle.started or expected is None or expected > window:
                continue
            usage = cycle.usage.get(job.spec.queue)
            if usage is None or not usage.within_capability(job.spec.gang_request):
                continue
            cycle.unblock(holder)
            placement = place_job(
                cycle.room, job.spec, maximum=job.spec.min_available, within=nodes
            )
            if placement is not None:
                cycle.start(job, placement)
            _reblock(cycle, holder, parts)


def _reblock(cycle: CycleContext, holder: str, parts: list[TaskPlacement]) -> None:
    cycle.block(holder, tuple(parts))
