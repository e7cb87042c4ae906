"""Packing never-evicted work by eviction: a critical job takes lossless victims in a leaf
that already holds such work rather than open a new leaf on free room (issue 37).

packing.py packs never-evicted work (critical, protected) onto the leaves that hold such work
— but only on their free room, and on a busy cluster research fills that room as soon as it
frees up: a small critical job then lands on free room in a leaf that held none, and a `hard`
gang that needs a whole leaf cannot have it while that job runs (hours). With
`pack_with_victims` (off by default; config.py says why) the critical pass does instead:

1. allocate (`packing.place_packed`): a never-evicted job that fits on free room only where
   it would open a leaf is *deferred* — not placed yet (`deferred`);
2. its victim searches (preempt, reclaim: `eviction.search` asks `packed_plan` first) look
   among the victims on the leaves holding never-evicted work, and take a plan only if it
   loses no work, no victim releases after the job's start SLO and the job's placement stays
   on those leaves. Such a plan is taken by any never-evicted job, deferred or not; a deferred
   job takes no other plan;
3. after reclaim (`place_deferred`, the last step of cycle.critical_first): a deferred job
   that got no plan takes the free room after all, in the same cycle.

So a critical job waits at most for its victims' release, inside its start SLO, and loses
nobody's work for it; and it is never left waiting where it would have started without the
rule. May not: evict a victim that would lose work, or delay a job past the end of its cycle
when free room holds it.
"""

from __future__ import annotations

from caldera.core.context import CycleContext
from caldera.core.packing import count_non_evictable, deferred, leaf_load
from caldera.core.placement import place_job
from caldera.core.plan_search import find_plan
from caldera.core.snapshot import JobView
from caldera.core.victims import Enough, Plan, Veto, VictimIndex

__all__ = ["packed_plan", "place_deferred"]


def packed_plan(
    cycle: CycleContext,
    job: JobView,
    index: VictimIndex,
    allow: Veto | None,
    enough: Enough | None,
    patience: float | None,
) -> tuple[bool, Plan | None]:
    """(settled, plan): settled when the rule decides this search — a lossless, in-time plan
    on the leaves holding never-evicted work, or, for a deferred job, no plan at all (it takes
    the free room after reclaim). Not settled: search as usual."""
    spec = job.spec
    if not cycle.config.pack_with_victims or not spec.never_a_victim:
        return False, None
    load = leaf_load(cycle)
    if load is None:
        return False, None
    room = cycle.room
    nodes = {node for leaf, milli in load.items() if milli > 0 for node in room.tier1_nodes[leaf]}
    if not nodes:
        return False, None
    waits = spec.id in deferred(cycle)
    if not waits and _fits_elsewhere(cycle, job):
        # A job of a shape allocate deferred this cycle was not tried there: it fits on free
        # room, so it is deferred as well, not sent to a search that may evict at a loss.
        deferred(cycle).add(spec.id)
        waits = True
    units = [u for u in index.units if all(t.node in nodes for t in u.placements)]
    plan = None
    if units:
        local = VictimIndex(units, index.first)
        plan = find_plan(room, spec, local, cycle.decided.evicted, allow, patience, enough, load)
    if plan is not None and (
        plan.cost.lost > 0 or plan.cost.late or any(t.node not in nodes for t in plan.placement)
    ):
        plan = None
    if plan is not None or waits:
        return True, plan
    return False, None


def _fits_elsewhere(cycle: CycleContext, job: JobView) -> bool:
    """Does the job's gang fit on the cycle's free room now (the room left as it was)?"""
    room = cycle.room
    mark = room.mark()
    placed = place_job(room, job.spec, maximum=job.spec.min_available)
    room.rollback(mark)
    return placed is not None


def place_deferred(cycle: CycleContext) -> None:
    """Deferred jobs that got no plan start on free room, in rank order (module docstring)."""
    waiting = deferred(cycle)
    if not waiting:
        return
    nominated = {n.job for n in cycle.decided.nominations if n.nomination is not None}
    jobs = sorted(
        (job for job_id in waiting if (job := cycle.jobs.get(job_id)) is not None),
        key=lambda job: job.spec.rank,
    )
    for job in jobs:
        if job.id in cycle.decided.started or job.id in nominated:
            continue
        spec = job.spec
        if not cycle.usage[spec.queue].within_capability(spec.gang_request):
            continue
        if not cycle.may_return(job):
            continue
        placement = place_job(cycle.room, spec, maximum=spec.min_available)
        if placement is not None:
            cycle.start(job, placement)
            count_non_evictable(cycle, placement)
