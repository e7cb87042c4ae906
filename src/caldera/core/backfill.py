"""Phase 5, backfill: use room that is left without delaying anyone who holds a reservation.

May: add the extra tasks of running elastic jobs (tasks above `min_available`), binpacked, as
far as their queue's capability allows. May not: touch room reserved for a preemptor, or
evict. (DESIGN lets backfill lend reserved room to jobs expected to finish first; caldera does
not: an expected duration is a promise nothing enforces, and a filler that overruns would hold
a critical or large job's room — the reservation lasts only a grace period anyway.)
"""

from __future__ import annotations

from caldera.core.allocate import job_order
from caldera.core.context import CycleContext
from caldera.core.placement import place_job
from caldera.core.snapshot import JobView
from caldera.model import JobState

__all__ = ["backfill"]


def backfill(cycle: CycleContext) -> None:
    _grow_elastic(cycle)


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
        # A task still releasing is still a replica: never more than `tasks` alive at once.
        want = job.spec.tasks - len(job.placement) - len(job.releasing)
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
