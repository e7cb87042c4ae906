"""Phase 5, backfill: use room that is left without delaying anyone who holds a reservation.

May: add the extra tasks of elastic jobs (tasks above `min_available`) — running ones, and
those allocate started at their minimum this cycle — binpacked, queues with the lowest share
first, as far as their queue's capability allows; with `planned_backfill` (off by default,
config.py says why), start a waiting job in room reserved for a starving large job's planned
start (core/planning.py) when it is expected to end before that start (Slurm's backfill: it
delays no reservation, as far as expected ends hold). May not:
touch room reserved for a preemptor's victims (a nomination), start a job in reserved room
whose end is unknown or later than the planned start, or evict.
"""

from __future__ import annotations

from caldera.core.allocate import job_order
from caldera.core.context import CycleContext
from caldera.core.estimates import expected_end
from caldera.core.eviction import fits_on_free_room
from caldera.core.placement import place_job
from caldera.core.planning import plans
from caldera.core.snapshot import JobView
from caldera.model import JobState

__all__ = ["backfill"]


def backfill(cycle: CycleContext) -> None:
    _grow_elastic(cycle)
    _fill_planned_room(cycle)


def _grow_elastic(cycle: CycleContext) -> None:
    """Extra tasks for running elastic jobs and for those allocate started at their
    minimum, queues by share (lowest first), then job order."""
    index = cycle.snapshot.job_index
    growing = [
        job
        for job in index.growable.values()
        if job.id not in cycle.decided.evicted and job.state is JobState.RUNNING
    ]
    started: dict[str, int] = {}
    for start in cycle.decided.starts:
        job = cycle.jobs.get(start.job)
        if job is not None and not start.grow and job.spec.tasks > len(start.placement):
            growing.append(job)
            started[job.id] = len(start.placement)
    # Lowest department share first, then lowest share (a flat list: (share, share)).
    shares = {name: (usage.tree_share, usage.share) for name, usage in cycle.usage.items()}
    growing.sort(key=lambda job: (shares.get(job.spec.queue, (0.0, 0.0)), job_order(job)))
    for job in growing:
        usage = cycle.usage.get(job.spec.queue)
        if usage is None or cycle.out_of_starts(job.spec.priority):
            continue
        # A task still releasing is still a replica: never more than `tasks` alive at once.
        alive = started.get(job.id, len(job.placement) + len(job.releasing))
        want = job.spec.tasks - alive
        while want and not usage.within_capability(job.spec.task_request.scaled(want)):
            want -= 1
        if not want:
            continue
        nodes = _nodes_of(cycle, job, started.get(job.id) is not None)
        extra = place_job(cycle.room, job.spec, minimum=1, maximum=want, within=nodes)
        if extra is None:
            continue
        if job.id in started:
            cycle.extend_start(job, extra)
        else:
            cycle.start(job, extra, grow=True)


def _nodes_of(cycle: CycleContext, job: JobView, just_started: bool) -> tuple[int, ...] | None:
    """Hard topology keeps extra tasks inside the domain the job already runs in."""
    topology = job.spec.topology
    if topology is None or topology.mode.value != "hard":
        return None
    if just_started:
        placement = next(s.placement for s in cycle.decided.starts if s.job == job.id)
    else:
        placement = job.placement
    if not placement:
        return None
    room = cycle.room
    first = room.nodes[placement[0].node]
    if topology.highest_tier <= 1:
        return tuple(room.tier1_nodes[first.tier1])
    return tuple(room.tier2_nodes[first.tier2])


def _fill_planned_room(cycle: CycleContext) -> None:
    """Start waiting jobs in room reserved for a planned start, each only if it is expected
    to end before every planned start whose room it may use (Slurm's backfill). In rank
    order over the waiting groups' first jobs (a group's later jobs wait behind it)."""
    planned = plans(cycle)
    if not planned or not cycle.config.planned_backfill:
        return
    estimates = cycle.snapshot.estimates
    now = cycle.now
    heads: list[JobView] = []
    for (key, jobs), first in cycle.waiting:
        if not cycle.in_pass(key):
            continue
        job = jobs[first]
        if job.id in cycle.decided.started or job.id in cycle.reservations or job.id in planned:
            continue
        if job.id in cycle.blocked or job.nomination is not None:
            continue
        heads.append(job)
    heads.sort(key=lambda job: job.spec.rank)
    for job in heads:
        if cycle.out_of_starts(job.spec.priority):
            break
        end = expected_end(job, estimates, now)
        usable = [
            plan for plan in planned.values() if end <= plan.at and plan.job in cycle.reservations
        ]
        if not usable:
            continue
        given = {plan.job: cycle.unreserve(plan.job) for plan in usable}
        placement = fits_on_free_room(cycle, job)
        if placement is not None:
            cycle.start(job, placement)
        for holder, parts in given.items():
            cycle.reserve(holder, parts)  # what the job did not take (`CycleContext._hold`)
