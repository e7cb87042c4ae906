"""V5, V6: Volcano's preempt action (actions/preempt): starving jobs take room inside their
own queue.

Queue by queue in share order, each queue's starving jobs (those that may preempt) in job
order: victims are running tasks of strictly lower-priority jobs of the same queue, on nodes
by descending score (binpack on the room that will be free; nodeorder under seed 001, S4).
Evictions go through `evict.take_room`, kept only when the job stops starving.
"""

from __future__ import annotations

from caldera.baselines.volcano.evict import take_room
from caldera.baselines.volcano.nodeorder import nodeorder_score
from caldera.baselines.volcano.session import Pod, Scope, Session, session_for, volcano_job_order
from caldera.baselines.volcano.victims import victim_nodes
from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.snapshot import JobView

__all__ = ["volcano_preempt"]


def _same_queue_lower(session: Session, preemptor: JobView, pod: Pod) -> bool:
    """V6 victims: other jobs of the preemptor's queue with strictly lower priority."""
    job, _ = pod
    return (
        job.spec.queue == preemptor.spec.queue
        and job.id != preemptor.id
        and job.spec.priority < preemptor.spec.priority
    )


def _by_score(session: Session, job: JobView, scope: Scope) -> list[int]:
    """V6: nodes holding possible victims, by descending score — binpack on the room that
    will be free."""
    future = session.future.room
    nodes = set(victim_nodes(session, job, EvictReason.PREEMPT))
    if scope is not None:
        nodes.intersection_update(scope)
    if session.one_tier:  # S4: seed 001 scores nodes with nodeorder, not binpack
        spec = job.spec
        return sorted(nodes, key=lambda n: (-nodeorder_score(future, n, spec), n))
    return sorted(nodes, key=lambda n: (future.whole[n], future.free_milli(n), n))


def volcano_preempt(cycle: CycleContext) -> None:
    """V5, V6: starving jobs, queue by queue (share order), preempt inside their queue."""
    session = session_for(cycle)
    per_queue: dict[str, list[JobView]] = {}
    for (queue, _), jobs in session.starving.items():
        if jobs[0].spec.may_preempt and victim_nodes(session, jobs[0], EvictReason.PREEMPT):
            per_queue.setdefault(queue, []).extend(jobs)
    hopeless: set[tuple[int, str, int]] = set()
    for queue in sorted(per_queue, key=lambda q: (session.queues[q].share, q)):
        for job in sorted(per_queue[queue], key=lambda j: volcano_job_order(session, j)):
            key = (job.spec.shape, queue, job.spec.priority)
            if key in hopeless:
                continue
            if take_room(session, job, EvictReason.PREEMPT, _same_queue_lower, _by_score):
                hopeless.clear()  # evictions may leave spare room others can use
            else:
                hopeless.add(key)
