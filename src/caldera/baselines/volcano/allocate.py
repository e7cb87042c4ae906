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
)
from caldera.baselines.proportion import QueueShare
from caldera.baselines.volcano.nodeorder import most_pods, nodeorder_place
from caldera.baselines.volcano.session import Scope, Session, session_for, volcano_job_order
from caldera.core.context import CycleContext
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.core.usage import QueueUsage
from caldera.model import JobSpec, JobState

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
    for hung in running_with_missing(cycle):
        if hung.spec.queue in session.queues:
            running.setdefault(hung.spec.queue, []).append(hung)
    heap = [(session.queues[name].share, name) for name in groups.keys() | running.keys()]
    heapq.heapify(heap)
    failed: set[int] = set()
    backlogs: dict[str, _Backlog] = {}  # queues that got a turn
    while heap:
        _, name = heapq.heappop(heap)
        share = session.queues[name]
        if share.overused:
            # Not allocated this cycle: those not ready are starving (V5).
            if name in backlogs:
                backlogs[name].starve_rest()
                continue
            for group in groups.get(name, ()):  # pending jobs: all starving, a group at once
                session.starve_all(group)
            for job in running.get(name, ()):
                if _starving_as_is(session, job):
                    session.starve(job)
            continue
        backlog = backlogs.get(name)
        if backlog is None:
            backlog = _Backlog(session, groups.get(name, []), running.get(name, []))
            backlogs[name] = backlog
        # A job that places nothing leaves every share as it was, so this queue would be
        # next again: keep its turn until a job changes its allocation.
        # A pending job whose shape found no room, or that its queue's deserved does not
        # allow, starves without a try (as `_allocate_job` would find), and so does the
        # rest of its group (`_Backlog`): a shape its deserved refuses is looked at once
        # (`refused`; a shape fixes the request per task).
        refused: set[int] = set()
        while (chosen := backlog.next_job(failed, refused)) is not None:
            spec = chosen.spec
            if chosen.state is not _RUNNING and not share.allows(spec.task_request):
                refused.add(spec.shape)
                session.starve(chosen)
                continue
            if _allocate_job(session, chosen, failed):
                break
        if backlog.left:
            heapq.heappush(heap, (share.share, name))


class _Backlog:
    """A queue's jobs in V3's order, handed out one at a time to allocate's turns: its
    pending groups (the job index's own lists, each in rank order already; read, never
    changed) and its running jobs with missing pods, merged by a heap over their heads.

    Backlogs are long (~1,300 jobs a cycle under seed 001) and most of their jobs starve
    without a try: those of a pending group whose shape found no room or whose request
    the queue's deserved refuses. Neither clears within allocate (room only shrinks while
    it places, and the queue's allocation only grows), so the rest of such a group starves
    at once, not job by job (`next_job`). The starving lists' order is read by no action:
    preempt and reclaim sort them, close asks whether any is left."""

    def __init__(
        self, session: Session, groups: list[list[JobView]], running: list[JobView]
    ) -> None:
        self._session = session
        self._groups = [*groups, *([job] for job in running)]
        self._pending = len(groups)  # groups below this index are pending groups
        self._next = [0] * len(self._groups)  # per group: the position of its next job
        self._heap = [
            (volcano_job_order(session, group[0]), i) for i, group in enumerate(self._groups)
        ]
        heapq.heapify(self._heap)
        self.left = sum(map(len, self._groups))  # jobs neither handed out nor starved

    def next_job(self, failed: set[int], refused: set[int]) -> JobView | None:
        """The next job to try, or None when none is left; pending groups whose shape is in
        `failed` or `refused` starve whole on the way."""
        heap = self._heap
        while heap:
            i = heap[0][1]
            group = self._groups[i]
            position = self._next[i]
            job = group[position]
            if i < self._pending and (job.spec.shape in failed or job.spec.shape in refused):
                heapq.heappop(heap)
                self._starve_group(i)
                continue
            position += 1
            self._next[i] = position
            self.left -= 1
            if position < len(group):
                heapq.heapreplace(heap, (volcano_job_order(self._session, group[position]), i))
            else:
                heapq.heappop(heap)
            return job
        return None

    def starve_rest(self) -> None:
        """The queue is overused: every job left that is not ready starves (V5)."""
        for _, i in self._heap:
            if i < self._pending:
                self._starve_group(i)
            else:
                job = self._groups[i][self._next[i]]
                if _starving_as_is(self._session, job):
                    self._session.starve(job)
                self.left -= 1
        self._heap.clear()

    def _starve_group(self, i: int) -> None:
        """A pending group's jobs left all starve."""
        group = self._groups[i]
        rest = group[self._next[i] :]
        self._session.starve_all(rest)
        self.left -= len(rest)
        self._next[i] = len(group)


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


def _runs_out_of_room(
    session: Session, spec: JobSpec, share: QueueShare, usage: QueueUsage, want: int
) -> bool:
    """Would the placement loop below, for a job with none of its `want` pods running, run
    out of room in every scope — a pod finding no node, idle or future — before it places
    `min_available` pods, and before its queue's deserved or capability stop it? Then its
    outcome is known without placing a pod: the shape failed, the job starves.

    Only where one room serves both views (nothing is being released: a pod that finds no
    idle room finds no future room) and nodeorder places (seed 001): no more pods fit than
    `most_pods` says, in any scope; the checks that come before each pod are made as the
    loop makes them, on a copy of the queue's share. Most tries of a long backlog of
    whole-node gangs end so, each after placing pods one by one and rolling them back."""
    staged = session.staged
    if staged.place is not nodeorder_place or not staged.shared:
        return False
    most = most_pods(staged.idle, spec)
    if most is None or most >= spec.min_available or most >= want:
        return False
    request = spec.task_request
    if not most:  # the checks before the first pod, on the share as it is
        return share.allows(request) and usage.within_capability(request.scaled(1))
    trial = QueueShare(share.queue, allocated=list(share.allocated), deserved=share.deserved)
    for placed in range(most + 1):  # the checks before pod `placed + 1`
        if not trial.allows(request) or not usage.within_capability(request.scaled(placed + 1)):
            return False
        trial.add(request)
    return True


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
    scopes = _scopes(session, job, cycle.room)
    if not running and scopes and _runs_out_of_room(session, spec, share, usage, want):
        failed.add(spec.shape)
        session.starve(job)
        return False
    no_room = False
    for scope in scopes:
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
