"""The greedy eviction preempt (V6) and reclaim (V7) share: Volcano's per-task victim loop
inside a Statement (framework/statement.go commit / discard).

For one starving job: one domain at a time, its pending tasks one node at a time, victims
evicted in order until the task fits there, then pipelined; the job's evictions are kept
only if it stops starving, else the statement rolls back. What differs between the two
actions comes in as arguments: the per-task victim rule and the node order.
"""

from __future__ import annotations

from collections.abc import Callable

from caldera.baselines.common import can_host, domain_nodes, domain_of, missing_tasks
from caldera.baselines.volcano.session import Scope, Session
from caldera.baselines.volcano.victims import VictimRule, victim_nodes, victims_on
from caldera.core.decisions import EvictReason
from caldera.core.placement import fit_on_node
from caldera.core.snapshot import JobView
from caldera.model import GPU_MILLI, JobState

__all__ = ["NodeOrder", "take_room"]

NodeOrder = Callable[[Session, JobView, Scope], list[int]]
"""(session, preemptor, scope) -> the nodes to try, in order."""


def _could_hold(session: Session, job: JobView, reason: EvictReason, scope: Scope) -> bool:
    """A quick bound: could the room that will be free plus every possible victim's GPUs in
    `scope` hold the job's missing gang at all? If not, trying is pointless."""
    spec = job.spec
    running = session.running(job) if job.state is JobState.RUNNING else 0
    need = spec.gpu * max(spec.min_available - running, 0)
    victims = victim_nodes(session, job, reason)
    future = session.future.room
    nodes = scope if scope is not None else range(len(future.nodes))
    room = 0
    for node in nodes:
        if spec.gpu >= GPU_MILLI:
            room += future.whole[node] * GPU_MILLI + victims.get(node, 0)
        else:
            room += future.free_milli(node) + victims.get(node, 0)
        if room >= need:
            return True
    return False


def take_room(
    session: Session,
    job: JobView,
    reason: EvictReason,
    rule: VictimRule,
    order: NodeOrder,
) -> bool:
    """Pipeline the starving job's pending tasks, one node per task, evicting greedily; keep
    the evictions only if the job stops starving (V6 commit / discard). True when kept."""
    spec = job.spec
    running = job.state is JobState.RUNNING
    ready = session.running(job) if running else 0
    want = missing_tasks(job) if running else spec.tasks
    share = session.queues[spec.queue]
    future = session.future.room
    domains = domain_nodes(future, spec)
    if running and job.placement:
        scopes: list[Scope] = [domain_of(future, spec, job.placement[0].node)]
    elif domains is not None:
        # Most room that will be free first: the fewest evictions.
        roomiest = sorted(domains, key=lambda d: (-sum(future.whole[n] for n in d), d[0]))
        scopes = [*roomiest]
    else:
        scopes = [None]
    for scope in scopes:
        if not _could_hold(session, job, reason, scope):
            continue
        mark = session.staged.mark()
        first = session.evictions.mark()
        pipelined = 0
        for _ in range(want):
            if ready + pipelined >= spec.min_available:
                break  # no longer starving
            if reason is EvictReason.RECLAIM and not share.allows(spec.task_request):
                break  # V7: only while the queue stays within what it deserves
            placed, tried = _preempt_task(
                session, job, scope, reason, rule, order, ready + pipelined
            )
            if placed:
                pipelined += 1
            elif not tried:
                break  # nothing changed: the next (identical) task fails the same way
        if ready + pipelined >= spec.min_available:
            session.evictions.commit(session.cycle, first, job, reason)
            session.counted[job.id] = pipelined
            return True
        session.staged.rollback(mark)
    return False


def _preempt_task(
    session: Session,
    job: JobView,
    scope: Scope,
    reason: EvictReason,
    rule: VictimRule,
    order: NodeOrder,
    holding: int = 0,
) -> tuple[bool, bool]:
    """One task, one node at a time (V6/V7); `holding`: the job's tasks ready or pipelined
    so far (drf's view of it, S2). Returns (pipelined, any node was tried)."""
    spec = job.spec
    room = session.future.room
    preempting = reason is EvictReason.PREEMPT
    tried = False
    for node in order(session, job, scope):
        if not can_host(room, node, spec):
            continue
        victims = victims_on(session, job, node, rule, not preempting, holding)
        if not victims:
            continue  # ValidateVictims: no victims, not a candidate
        free = session.future.free_on(node)
        if (
            free.gpu + sum(p[0].spec.gpu for p in victims) < spec.gpu
            or free.cpu + sum(p[0].spec.cpu for p in victims) < spec.cpu
            or free.memory + sum(p[0].spec.memory for p in victims) < spec.memory
        ):
            continue  # ValidateVictims: not enough even with all of them
        tried = True

        for pod in victims:
            if _enough(session, job, node, preempting):
                break
            if rule(session, job, pod):  # reclaim's gang check changes as tasks go
                session.stage_evict(*pod)
        if _enough(session, job, node, preempting):
            task = fit_on_node(room, node, spec.gpu, spec.cpu, spec.memory)
            assert task is not None
            session.staged.take_future(task)
            session.queue_add(job, 1)
            return True, True
        # Evictions on this node stay in the statement (Volcano does not undo them per node).
    return False, tried


def _enough(session: Session, job: JobView, node: int, preempting: bool) -> bool:
    """Stop evicting: the task fits on the node's future room — and, in preempt, its queue
    stays within deserved (Volcano keeps preempting while the queue would be overused)."""
    spec = job.spec
    if preempting and not session.queues[spec.queue].allows(spec.task_request):
        return False
    room = session.future.room
    return fit_on_node(room, node, spec.gpu, spec.cpu, spec.memory) is not None
