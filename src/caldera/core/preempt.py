"""Phase 3, preempt: inside one queue, free room for a job allocate could not place.

May: evict running jobs of the preemptor's own queue that the victim rules allow (lower
priority, lower effective weight, unprotected, out of cooldown), whole gangs or tasks above
`min_available`, only when the resulting room lets the preemptor actually be placed and keeps
its queue within its capability (a job held back only by that capability preempts too);
nominate that room.
May not: exceed the per-cycle eviction budget, evict for a debug job, or evict anything when
no feasible set exists. A preemptor whose queue is below its deserved share while other
queues borrow is left to reclaim, which takes the lent room back first (borrowers first).
"""

from __future__ import annotations

from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.eviction import continue_nominations, give_way, hopeless, search
from caldera.core.jobindex import GroupKey
from caldera.core.pools import VictimPools, frees, over_capability
from caldera.core.reclaim import borrowers_first
from caldera.core.snapshot import JobView
from caldera.core.victims import Plan

__all__ = ["preempt"]


def preempt(cycle: CycleContext) -> None:
    continue_nominations(cycle)  # this pass's nominations, each once a cycle
    deferred: set[str] = cycle.memo("borrowers_first", set)

    def may_try(job: JobView, key: GroupKey) -> bool:
        if borrowers_first(cycle, job, key):
            deferred.add(job.id)
            return False
        return True

    def planner(job: JobView, pools: VictimPools) -> Plan | None:
        if hopeless(cycle, job) or pools.own_never_fits(job):
            return None
        queue = job.spec.queue
        over = over_capability(cycle.usage[queue], job.spec.gang_request)
        return search(
            cycle, job, pools.own(job), enough=None if over is None else frees(queue, over)
        )

    give_way(cycle, EvictReason.PREEMPT, planner, may_try)
