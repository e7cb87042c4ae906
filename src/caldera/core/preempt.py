"""Phase 3, preempt: inside one queue, free room for a job allocate could not place.

May: evict running jobs of the preemptor's own queue that the victim rules allow (lower
priority, lower effective weight, unprotected, out of cooldown), whole gangs or tasks above
`min_available`, only when the resulting room lets the preemptor actually be placed and keeps
its queue within its capability (a job held back only by that capability preempts too);
nominate that room. May not: exceed the per-cycle eviction budget, evict for a debug job, or evict
anything when no feasible set exists.
"""

from __future__ import annotations

from collections.abc import Collection

from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.eviction import VictimsByQueue, continue_nominations, give_way, lower_priority
from caldera.core.snapshot import JobView

__all__ = ["preempt"]


def _same_queue(preemptor: JobView, by_queue: VictimsByQueue) -> list[Collection[JobView]]:
    return lower_priority(by_queue.get(preemptor.spec.queue, {}), preemptor.spec.priority)


def preempt(cycle: CycleContext) -> None:
    cycle.memo("nominations_continued", lambda: continue_nominations(cycle))
    give_way(cycle, EvictReason.PREEMPT, _same_queue, frees_quota=True)
