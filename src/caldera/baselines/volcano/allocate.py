"""V3, V4, V5: Volcano's allocate action (actions/allocate).

Queues by share, skipping those whose allocation reached deserved; one job per turn, each
placed task by task on idle room (binpack, or nodeorder under seed 001) or pipelined onto room
being released; a job binds when ready, stays pipelined until the cycle ends, or is rolled
back and marked starving for preempt and reclaim. It may start jobs; it never evicts.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from caldera.baselines.common import (
    domain_nodes,
    domain_of,
    missing_tasks,
    running_with_missing,
    sorted_by_rank,
)
from caldera.baselines.volcano.session import Scope, Session, session_for, volcano_job_order
from caldera.core.context import CycleContext
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.model import JobState

__all__ = ["volcano_allocate"]


def volcano_allocate(cycle: CycleContext) -> None:
    """V3, V4, V5: queues by share, skipping overused ones; one job per turn; each job placed
    task by task, bound when ready, kept pipelined, or rolled back and marked starving."""
    session = session_for(cycle)
    groups: dict[str, list[list[JobView]]] = {}  # pending jobs by queue, in enqueue's groups
    for (queue, _, _), group in cycle.eligible_groups:
        if queue in session.queues:
            groups.setdefault(queue, []).append(group)
    running: dict[str, list[JobView]] = {}
    for job in running_with_missing(cycle):
        if job.spec.queue in session.queues:
            running.setdefault(job.spec.queue, []).append(job)
    heap = [(session.queues[name].share, name) for name in groups.keys() | running.keys()]
    heapq.heapify(heap)
    failed: set[int] = set()
    in_order: dict[str, list[JobView]] = {}  # queues that got a turn: jobs sorted, pop() = next
    while heap:
        _, name = heapq.heappop(heap)
        share = session.queues[name]
        if share.overused:
            # Not allocated this cycle: those not ready are starving (V5).
            if name in in_order:
                for job in in_order[name]:
                    if _starving_as_is(session, job):
                        session.starve(job)
                continue
            for group in groups.get(name, ()):  # pending jobs: all starving, a group at once
                session.starving.setdefault((name, group[0].spec.priority), []).extend(group)
            for job in running.get(name, ()):
                if _starving_as_is(session, job):
                    session.starve(job)
            continue
        jobs = in_order.get(name)
        if jobs is None:
            jobs = [job for group in groups.get(name, ()) for job in group]
            if name in running:
                jobs.extend(running[name])
                jobs.sort(key=lambda j: volcano_job_order(session, j), reverse=True)
            else:  # pending jobs only: V3's order is their rank (none is ready)
                jobs = sorted_by_rank(f"volcano {name}", jobs, reverse=True)
            in_order[name] = jobs
        # A job that places nothing leaves every share as it was, so this queue would be
        # next again: keep its turn until a job changes its allocation.
        # A pending job whose shape found no room, or that its queue's deserved does not
        # allow, starves without a try (as `_allocate_job` would find): backlogs are long.
        # Until a job is placed the share stays as it is: a shape it does not allow is
        # looked at once (`refused`; a shape fixes the request per task).
        starving = session.starving
        refused: set[int] = set()
        while jobs:
            job = jobs.pop()
            spec = job.spec
            if job.state is not _RUNNING:
                shape = spec.shape
                if shape in failed or shape in refused:
                    starving.setdefault((name, spec.priority), []).append(job)
                    continue
                if not share.allows(spec.task_request):
                    refused.add(shape)
                    starving.setdefault((name, spec.priority), []).append(job)
                    continue
            if _allocate_job(session, job, failed):
                break
        if jobs:
            heapq.heappush(heap, (share.share, name))


_RUNNING = JobState.RUNNING


def _starving_as_is(session: Session, job: JobView) -> bool:
    """V5 for a job nothing was placed for: ready tasks alone below `min_available`."""
    ready = session.running(job) if job.state is JobState.RUNNING else 0
    return ready < job.spec.min_available


def _scopes(session: Session, job: JobView, room: Room) -> list[Scope]:
    """Where the job's tasks may go: its own domain if it runs under a hard topology, else
    each domain (most suitable first), else anywhere."""
    spec = job.spec
    if job.state is JobState.RUNNING and job.placement:
        return [domain_of(room, spec, job.placement[0].node)]
    domains = domain_nodes(room, spec)
    if domains is None:
        return [None]
    need = spec.whole_gpus * spec.min_available
    future = session.future.room

    def whole(nodes: Sequence[int], of: Room) -> int:
        return sum(of.whole[n] for n in nodes)

    usable: list[tuple[int, ...]] = [d for d in domains if whole(d, future) >= need]
    usable.sort(key=lambda d: (whole(d, room), d[0]))  # binpack over domains
    return [*usable]


def _allocate_job(session: Session, job: JobView, failed: set[int]) -> bool:
    """V4 for one job. True when its queue's allocation changed (tasks kept)."""
    cycle = session.cycle
    spec = job.spec
    usage = cycle.usage[spec.queue]
    share = session.queues[spec.queue]
    running = job.state is JobState.RUNNING
    ready_now = session.running(job) if running else 0
    want = missing_tasks(job) if running else spec.tasks
    if (not running and spec.shape in failed) or not share.allows(spec.task_request):
        if ready_now < spec.min_available:
            session.starve(job)
        return False
    no_room = False
    for scope in _scopes(session, job, cycle.room):
        mark = session.staged.mark()
        placed: list[TaskPlacement] = []
        pipelined = 0
        no_room = False
        for _ in range(want):
            request = spec.task_request
            if not share.allows(request) or not usage.within_capability(
                request.scaled(len(placed) + 1)
            ):
                break  # the same check fails for every other task of the job
            task = session.staged.place_idle(spec, scope)
            if task is not None:
                placed.append(task)
            elif session.staged.place_future(spec, scope, hold_idle=True) is not None:
                pipelined += 1
            else:
                no_room = True
                break  # tasks are alike: none of the rest fits either
            session.queue_add(job, 1)
        ready = ready_now + len(placed)
        if ready >= spec.min_available:
            if placed:
                cycle.start(job, tuple(placed), grow=running)
            session.counted[job.id] = pipelined
            return bool(placed) or pipelined > 0
        if ready + pipelined >= spec.min_available:
            session.counted[job.id] = len(placed) + pipelined  # held until the cycle ends
            return True
        session.staged.rollback(mark)
    if no_room and not running:
        failed.add(spec.shape)
    session.starve(job)
    return False
