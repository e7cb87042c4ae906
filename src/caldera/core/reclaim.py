"""Phase 4, reclaim: across queues, take back lent room for a queue below its deserved share.

May: evict jobs of other queues that are reclaimable and hold more than they deserve, under
the same victim rules as preempt, and only while the preemptor's queue stays within its
deserved share (a critical preemptor: within its queue's capability). May not: take from a
queue marked `reclaimable: false`, push any queue below its deserved share or its guarantee,
or take more than the preemptor needs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.eviction import VictimsByQueue, give_way, lower_priority
from caldera.core.snapshot import JobView
from caldera.core.victims import Unit
from caldera.model import CRITICAL_PRIORITY

__all__ = ["reclaim"]


def reclaim(cycle: CycleContext) -> None:
    usage = cycle.usage

    def floor(queue: str) -> int:
        entry = usage[queue]
        guarantee = entry.queue.guarantee.gpu if entry.queue.guarantee else 0
        return max(entry.deserved.gpu, guarantee)

    def kept(queue: str) -> int:
        """GPUs the queue keeps once what is already leaving has left. Jobs started in this
        very cycle do not count: room is not taken back from one job to start another."""
        entry = usage[queue]
        return entry.held_at_start - entry.releasing

    def lender(preemptor: JobView) -> bool:
        """Does the preemptor's queue, with everything it starts this cycle, stay within what
        it deserves once the preemptor runs? A critical job only needs to stay within its
        queue's capability: critical work may preempt everything below it (DESIGN §2), and
        must not wait because its team is at its share while others borrow."""
        queue = preemptor.spec.queue
        entry = usage.get(queue)
        if entry is None:
            return False
        holds = entry.allocated.gpu - entry.releasing
        if preemptor.spec.priority >= CRITICAL_PRIORITY:
            return entry.within_capability(preemptor.spec.gang_request)
        return holds + preemptor.spec.gang_request.gpu <= floor(queue)

    def borrowers(preemptor: JobView, by_queue: VictimsByQueue) -> list[Collection[JobView]]:
        """Running jobs of other queues that are reclaimable and hold more than their floor."""
        return [
            group
            for queue, by_priority in by_queue.items()
            if queue != preemptor.spec.queue
            and queue in usage
            and usage[queue].queue.reclaimable
            and kept(queue) > floor(queue)
            for group in lower_priority(by_priority, preemptor.spec.priority)
        ]

    def stays_above_floor(preemptor: JobView, unit: Unit, taken: Mapping[str, int]) -> bool:
        queue = unit.job.spec.queue
        return kept(queue) - taken.get(queue, 0) - unit.gpu >= floor(queue)

    give_way(cycle, EvictReason.RECLAIM, borrowers, stays_above_floor, lender)
