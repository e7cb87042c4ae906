"""V5, V7: Volcano's reclaim action (actions/reclaim): starving jobs of queues below deserved
take room back from other queues.

Queues by share (skipping overused ones), their starving jobs not yet counted in job order:
victims are running tasks of other queues not marked `reclaimable: false`, only above their
job's `min_available`, on nodes in plain order. Evictions go through `evict.take_room`, kept
only when the job stops starving.
"""

from __future__ import annotations

import heapq

from caldera.baselines.volcano.evict import take_room
from caldera.baselines.volcano.session import Pod, Scope, Session, session_for, volcano_job_order
from caldera.baselines.volcano.victims import victim_nodes
from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.snapshot import JobView

__all__ = ["volcano_reclaim"]


def _reclaimable_above_min(session: Session, preemptor: JobView, pod: Pod) -> bool:
    """V7 victims: jobs of other, reclaimable queues, only while they keep more than their
    `min_available` (checked again before each task, as tasks go)."""
    job, _ = pod
    queue = session.cycle.snapshot.queues.get(job.spec.queue)
    return (
        job.spec.queue != preemptor.spec.queue
        and queue is not None
        and queue.reclaimable
        and session.running(job) > job.spec.min_available
    )


def _plain(session: Session, job: JobView, scope: Scope) -> list[int]:
    """V7: nodes holding possible victims, in plain order."""
    nodes = victim_nodes(session, job, EvictReason.RECLAIM).keys()
    return sorted(nodes if scope is None else nodes & set(scope))


def volcano_reclaim(cycle: CycleContext) -> None:
    """V5, V7: queues by share (skipping overused ones), their starving jobs in order, take
    room back from other queues."""
    session = session_for(cycle)
    per_queue: dict[str, list[JobView]] = {}
    takes_from: dict[str, bool] = {}  # queue: is there anything it could reclaim at all?
    for (queue, _), jobs in session.starving.items():
        if not jobs[0].spec.may_preempt:
            continue
        found = takes_from.get(queue)
        if found is None:
            found = takes_from[queue] = bool(victim_nodes(session, jobs[0], EvictReason.RECLAIM))
        if found:
            per_queue.setdefault(queue, []).extend(
                job for job in jobs if job.id not in session.counted
            )
    per_queue = {name: jobs for name, jobs in per_queue.items() if jobs}
    heap = [(session.queues[name].share, name) for name in per_queue]
    heapq.heapify(heap)
    hopeless: set[tuple[int, str, int]] = set()
    in_order: set[str] = set()
    while heap:
        _, name = heapq.heappop(heap)
        share = session.queues[name]
        if share.overused:
            continue
        jobs = per_queue[name]
        if name not in in_order:
            jobs.sort(key=lambda j: volcano_job_order(session, j), reverse=True)
            in_order.add(name)
        job = jobs.pop()
        key = (job.spec.shape, name, job.spec.priority)
        if key not in hopeless:
            if take_room(session, job, EvictReason.RECLAIM, _reclaimable_above_min, _plain):
                hopeless.clear()
            else:
                hopeless.add(key)
        if jobs:
            heapq.heappush(heap, (share.share, name))
