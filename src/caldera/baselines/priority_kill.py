"""`priority-kill`: per-pod priority preemption, the way kube-scheduler does it (BASELINES.md).

Rules (cited by the phases below):
  PK1. Order: pods by priority (high first), then submit time, then id — one line for the
       whole cluster; queues only bound what may run (capability, as a ResourceQuota does).
  PK2. Start: a job that is not running starts all-or-nothing, at least `min_available` pods
       at once (the platform's pod-group admission); the missing pods of a running job — a
       gang cut below its minimum, or elastic extras — are placed one by one as room appears.
       A job that does not fit is passed over.
  PK3. Preempt: a pending pod that fits nowhere, not even on room still being released, picks
       ONE node and evicts lower-priority pods there until it fits. Victims on a node follow
       kube-scheduler's selectVictimsOnNode: remove every lower-priority pod, check the pod
       fits, then reprieve the most important ones (priority, then earliest start) while it
       still fits. The node follows pickOneNodeForPreemption: lowest highest-victim priority,
       then smallest sum of victim priorities, then fewest victims, then the latest start of
       the highest-priority victims, then the first node.
  PK3a. Pod groups: the pod-group admission that starts a gang all-or-nothing (PK2) also
       turns a whole group away when its pods cannot all be scheduled (the coscheduling
       plugin's PostFilter), so the pods of a gang that is not running preempt only if every
       one of its `min_available` pods gets room this cycle; otherwise none of them evicts
       anything. A running job's missing pods preempt one by one.
  PK4. Victims are pods, not gangs: a gang can lose some pods and keep holding the others,
       making no progress (gang hang). Never a victim: priority >= 1000, conformance-protected
       (kube-system, system priority classes) or labelled protected.
  PK5. No checkpoint signal; grace period 30 s: a victim loses everything since its last
       periodic checkpoint (see `baseline_defaults`).
  PK6. No reservation, no throttle: a preemptor counts on the room only inside the cycle;
       whoever is ordered first when the room is released takes it.
  PK6a. Within a cycle, room promised to a higher-priority pod is not given to lower-priority
       ones (kube-scheduler counts nominated pods when it filters lower-priority pods): a gang
       whose pods all find room free or being released holds it until the cycle ends.
  PK7. Pods whose priority class says `Never` (debug) never preempt.

A hard topology constraint is a required pod affinity on the switch label: once a pod of the
gang runs or is nominated, its other pods stay inside that domain.

Phases: the platform's `enqueue`, `pk_allocate`, `pk_preempt`, `pk_close`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, floordiv

from caldera.baselines.common import (
    FutureRoom,
    Staged,
    StagedEvictions,
    baseline_defaults,
    can_host,
    domain_nodes,
    domain_of,
    is_protected,
    missing_tasks,
    pending_work,
    rerun_after_change,
    sorted_by_rank,
)
from caldera.baselines.ledger import RunningLedger, ledger_for
from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.enqueue import enqueue
from caldera.core.placement import fit_on_node, place_job
from caldera.core.policy import Policy
from caldera.core.room import Room
from caldera.core.snapshot import JobView
from caldera.model import GPU_MILLI, JobSpec, JobState, Resources

__all__ = ["PRIORITY_KILL", "pk_allocate", "pk_close", "pk_preempt"]

_SESSION = "priority-kill.session"

Pod = tuple[JobView, int]
"""A running pod: its job and its index in the job's running placement."""


@dataclass
class _Session:
    """What pk_allocate hands to pk_preempt within one cycle."""

    gone: set[str]  # jobs evicted whole before allocation (a queue's window closed)
    waiting: list[tuple[JobView, int]] = field(default_factory=list)  # (job, pods to place)
    unserved: list[JobView] = field(default_factory=list)  # pods found no room, claims included
    # Idle and future room side by side, built the first time a gang waits for room being
    # released (None: not yet; a shared one: nothing is being released).
    future: FutureRoom | None = None
    rooms: Staged | None = None
    cannot_hold: set[int] = field(default_factory=set)  # shapes whose room is not coming


@dataclass
class _Claims:
    """pk_preempt's working state: room free or being released (the cycle's own room, since
    nothing starts after allocation), running pods by node, the evictions chosen."""

    future: FutureRoom
    staged: Staged
    evictions: StagedEvictions
    gone: set[str]
    ledger: RunningLedger  # running pods by node
    started: set[str]  # jobs started or grown this cycle: not victims in the same cycle
    _below: dict[int, dict[int, int]] = field(default_factory=dict)

    def pods_on(self, node: int) -> list[Pod]:
        """The running pods on `node`, but those of jobs evicted whole before allocation."""
        gone = self.gone
        return [pod for pod in self.ledger.pods_on(node) if pod[0].id not in gone]

    def could_free(self, priority: int) -> dict[int, int]:
        """node -> milli-GPUs of the pods there below `priority` that could ever be victims:
        an upper bound on what preempting on that node can free (once per priority). The
        ledger keeps the unprotected running pods' by node and priority; jobs evicted whole
        or started (grown) this cycle are taken out here."""
        found = self._below.get(priority)
        if found is None:
            ledger = self.ledger
            found = ledger.victims_below(priority)
            copied = False
            for job_id in self.gone | self.started:
                job = ledger.views.get(job_id)
                if job is None or job.spec.priority >= priority or is_protected(job):
                    continue
                if not copied:
                    found, copied = dict(found), True  # the ledger's own stays as it is
                for node, (_, indexes) in ledger.on_node_of(job):
                    if node not in found:
                        continue  # pods asking for no GPU
                    left = found[node] - job.spec.gpu * len(indexes)
                    if left:
                        found[node] = left
                    else:
                        del found[node]
            self._below[priority] = found
        return found


def _session(cycle: CycleContext) -> _Session:
    return cycle.memo(_SESSION, lambda: _Session(set(cycle.decided.evicted)))


def _open_claims(cycle: CycleContext, session: _Session) -> _Claims:
    gone = session.gone
    if session.future is not None and session.rooms is not None and not session.future.shared:
        future, staged = session.future, session.rooms  # holds from allocation stay
    else:
        future = FutureRoom.in_place(cycle, gone)
        staged = Staged(cycle.room, future)
    ledger = ledger_for(cycle)
    return _Claims(future, staged, StagedEvictions(staged), gone, ledger, cycle.decided.started)


def pk_allocate(cycle: CycleContext) -> None:
    """PK1, PK2: place pods in priority order; remember the pods that found no room.

    A backlog is walked in full every cycle, and most of it fails the same way job after
    job: what a ResourceQuota lets in is worked out once per queue, request and pod count
    until the next start changes what the queues hold (`capped`), and a pending job whose
    shape found no room and has no room coming waits without another look."""
    session = _session(cycle)
    failed: set[int] = set()
    capped: dict[tuple[str, int, int, int, int], int] = {}  # -> pods let in; till a start
    usages = cycle.usage
    room = cycle.room
    waiting = session.waiting
    unplaced = cycle.unplaced
    cannot_hold = session.cannot_hold
    for job in sorted_by_rank("priority-kill", pending_work(cycle)):
        spec = job.spec
        usage = usages.get(spec.queue)
        if usage is None:
            continue
        running = job.state is _RUNNING
        pods = missing_tasks(job) if running else spec.tasks
        # A ResourceQuota refuses pods beyond the queue's capability.
        if pods and usage.queue.capability is not None:
            key = (spec.queue, spec.gpu, spec.cpu, spec.memory, pods)
            allowed = capped.get(key)
            if allowed is None:
                allowed = pods
                while allowed and not usage.within_capability(spec.task_request.scaled(allowed)):
                    allowed -= 1
                capped[key] = allowed
            pods = allowed
        if not pods or (not running and pods < spec.min_available):
            continue
        shape = spec.shape
        if running:
            within = domain_of(room, spec, job.placement[0].node)
            placed = place_job(room, spec, minimum=1, maximum=pods, within=within)
        elif shape in failed:
            if shape in cannot_hold or (session.future is not None and session.future.shared):
                # No room for its shape, none coming (`_hold` would find none): it waits.
                waiting.append((job, pods))
                unplaced.append(job)
                continue
            placed = None
        else:
            placed = place_job(room, spec, maximum=pods)
            if placed is None:
                failed.add(shape)
        if placed:
            cycle.start(job, placed, grow=running)
            capped.clear()  # the queues hold more now
            if session.future is not None and not session.future.shared:
                for task in placed:
                    session.future.room.take(task)
            pods -= len(placed)
        elif not running and shape not in cannot_hold and _hold(cycle, session, job):
            continue  # PK6a: its room is coming; it waits for it
        if pods:
            waiting.append((job, pods))
            if not placed:
                unplaced.append(job)


_RUNNING = JobState.RUNNING


def _hold(cycle: CycleContext, session: _Session, job: JobView) -> bool:
    """PK6a: a gang that is not running, whose `min_available` pods all find room free or
    being released, holds that room for the rest of the cycle — lower-priority pods may not
    take room nominated for a higher-priority pod, and coscheduling's waiting pods keep what
    they got. Nothing carries over to the next cycle (no reservation). True when held."""
    spec = job.spec
    if spec.shape in session.cannot_hold:
        return False
    if session.future is None:
        session.future = FutureRoom.separate(cycle, session.gone)
        if not session.future.shared:
            for start in cycle.decided.starts:  # what allocation has started so far
                for started in start.placement:
                    session.future.room.take(started)
        session.rooms = Staged(cycle.room, session.future)
    rooms = session.rooms
    if session.future.shared or rooms is None:
        return False  # nothing is being released: no room is coming
    mark = rooms.mark()
    hard = domain_nodes(cycle.room, spec) is not None
    scope: tuple[int, ...] | None = None
    for _ in range(spec.min_available):
        task = rooms.place_idle(spec, scope) or rooms.place_future(spec, scope, hold_idle=True)
        if task is None:
            rooms.rollback(mark)
            session.cannot_hold.add(spec.shape)  # room only shrinks while allocating
            return False
        if hard and scope is None:
            scope = domain_of(cycle.room, spec, task.node)
    return True


def pk_preempt(cycle: CycleContext) -> None:
    """PK3–PK7: each waiting pod claims room on one node, evicting lower-priority pods there
    when nothing else fits. Claims last for this cycle only (PK6): they are not starts."""
    session = _session(cycle)
    if not any(job.spec.may_preempt for job, _ in session.waiting):
        return
    claims = _open_claims(cycle, session)
    hopeless: set[tuple[int, int]] = set()  # (shape, priority) of groups that found no room
    for job, pods in session.waiting:
        spec = job.spec
        if not spec.may_preempt:  # PK7
            continue
        running = job.state is _RUNNING
        key = (spec.shape, spec.priority)
        if not running and key in hopeless:
            session.unserved.append(job)
            continue
        group = 1 if running else spec.min_available  # PK3a: pods that must all get room
        if not running and not _could_seat(claims, job, group):
            session.unserved.append(job)
            hopeless.add(key)
            continue
        mark = claims.staged.mark()
        first = claims.evictions.mark()
        claimed = _claim(claims, job, pods if running else group)
        if claimed >= group:
            if claims.evictions.mark() > first:
                claims.evictions.commit(cycle, first, job, EvictReason.PREEMPT)
                hopeless.clear()  # victims may leave spare room for others
        else:
            claims.staged.rollback(mark)
            session.unserved.append(job)
            if not running:
                hopeless.add(key)


def _could_seat(claims: _Claims, job: JobView, pods: int) -> bool:
    """A counting bound: could `pods` pods of `job` fit if every lower-priority pod that may
    be a victim left (inside one domain for a hard topology)? If not, the per-pod search
    cannot succeed and is skipped."""
    spec = job.spec
    room = claims.future.room
    freeable = claims.could_free(spec.priority)
    per_pod = max(spec.gpu, 1)

    def seats(nodes: Iterable[int]) -> bool:  # stops counting once there are enough
        count = 0
        for n in nodes:
            if count >= pods:
                return True
            count += (room.free_milli(n) + freeable.get(n, 0)) // per_pod
        return count >= pods

    domains = domain_nodes(room, spec)
    if domains is None:
        if room.milli_of or pods <= 0:  # MIG slices: free_milli leaves them out
            return seats(range(len(room.nodes)))
        # The same count without a walk over every node: what free room alone seats, from
        # the room's indexes, plus what the victims add on the few nodes that have some
        # (no slices, so a node's free milli-GPUs are its devices' sum; sums in C).
        free = list(map(sum, map(room.free.__getitem__, freeable)))
        with_victims = map(add, free, freeable.values())
        added: int = sum(map(floordiv, with_victims, repeat(per_pod)))
        added -= sum(map(floordiv, free, repeat(per_pod)))
        return _free_seats(room, per_pod) + added >= pods
    return any(seats(domain) for domain in domains)


def _free_seats(room: Room, per_pod: int) -> int:
    """How many pods of `per_pod` milli-GPUs the free room alone seats, one node each counted
    apart, in a room without MIG slices. A node with no partly used device has its whole
    free GPUs' worth (the room buckets nodes by that count); the few with one
    (`Room.partial`) are counted from their devices."""
    count = 0
    for buckets in room.buckets.values():
        for whole, nodes in enumerate(buckets):
            count += len(nodes) * (whole * GPU_MILLI // per_pod)
    for partial in room.partial.values():
        for node in partial:
            count += sum(room.free[node]) // per_pod - room.whole[node] * GPU_MILLI // per_pod
    return count


def _claim(claims: _Claims, job: JobView, pods: int) -> int:
    """Give up to `pods` pods room, one node each (PK3); returns how many got it."""
    spec = job.spec
    future = claims.future.room
    scope = domain_of(future, spec, job.placement[0].node) if job.placement else None
    hard = domain_nodes(future, spec) is not None
    claimed = 0
    for _ in range(pods):
        # Room that is free or being released comes first: no eviction needed for it.
        task = claims.staged.place_future(spec, scope)
        if task is None:
            choice = _pick_node(claims, job, scope)
            if choice is None:
                break
            node, victims = choice
            for victim, index in victims:
                claims.evictions.stage(victim, index)
            task = fit_on_node(future, node, spec.gpu, spec.cpu, spec.memory)
            assert task is not None, "the chosen victims make the pod fit"
            claims.staged.take_future(task)
        claimed += 1
        if hard and scope is None:
            scope = domain_of(future, spec, task.node)  # the gang's pod affinity
    return claimed


def pk_close(cycle: CycleContext) -> None:
    """kube-scheduler retries unschedulable pods as the cluster changes; the simulator runs at
    events, so ask for one more cycle a second later when this one started a lower-priority
    job a pod still without room could now evict (pods with room coming wait for its
    release, an event)."""
    rerun_after_change(
        cycle, _session(cycle).unserved, lambda v, p: v.spec.priority < p.spec.priority
    )


# -- PK3: one node, its victims ------------------------------------------------------------


def _candidates(claims: _Claims, preemptor: JobView, node: int) -> list[Pod]:
    """PK4: running pods on `node` of lower priority that may be victims."""
    priority = preemptor.spec.priority
    evictions = claims.evictions
    return [
        (job, index)
        for job, index in claims.pods_on(node)
        if job.spec.priority < priority
        and not is_protected(job)
        and job.id not in claims.gone
        and job.id not in claims.started
        and not evictions.is_cut(job, index)
    ]


def _importance(pod: Pod) -> tuple[int, float, str, int]:
    """kube-scheduler's MoreImportantPod: higher priority, then earlier start."""
    job, index = pod
    started = job.first_start if job.first_start is not None else 0.0
    return (-job.spec.priority, started, job.id, index)


def _victims_on_node(
    claims: _Claims, preemptor: JobView, node: int, candidates: Sequence[Pod]
) -> list[Pod] | None:
    """selectVictimsOnNode: the victims that let the pod fit on `node`, or None. The future
    room is exactly as before when this returns: it is a cycle's working copy, so what
    was given and taken here is rolled back from its journal (no checks to run again)."""
    room = claims.future.room
    spec = preemptor.spec
    mark = room.mark()
    for job, index in candidates:
        room.give(job.placement[index])
    if fit_on_node(room, node, spec.gpu, spec.cpu, spec.memory) is None:
        room.rollback(mark)
        return None
    victims: list[Pod] = []
    for pod in sorted(candidates, key=_importance):
        step = room.mark()
        room.take(pod[0].placement[pod[1]])
        if fit_on_node(room, node, spec.gpu, spec.cpu, spec.memory) is None:
            room.rollback(step)
            victims.append(pod)
    room.rollback(mark)
    return victims


def _node_score(node: int, victims: Sequence[Pod]) -> tuple[int, int, int, float, int]:
    """pickOneNodeForPreemption, lowest first: 1. highest victim priority; 2. sum of victim
    priorities; 3. number of victims; 4. latest start among the highest-priority victims
    (negated); 5. node."""
    top = max(job.spec.priority for job, _ in victims)
    earliest = min((job.first_start or 0.0) for job, _ in victims if job.spec.priority == top)
    total = sum(job.spec.priority for job, _ in victims)
    return (top, total, len(victims), -earliest, node)


def _pick_node(
    claims: _Claims, preemptor: JobView, scope: Sequence[int] | None
) -> tuple[int, list[Pod]] | None:
    future = claims.future
    spec = preemptor.spec
    freeable = claims.could_free(spec.priority)
    nodes = sorted(freeable if scope is None else freeable.keys() & set(scope))
    best: tuple[tuple[int, int, int, float, int], int, list[Pod]] | None = None
    room = future.room
    for node in nodes:
        if room.free_milli(node) + freeable[node] < spec.gpu:
            continue  # not enough GPUs even if every lower-priority pod went
        if not can_host(room, node, spec):
            continue
        candidates = _candidates(claims, preemptor, node)
        if not candidates:
            continue
        free = future.free_on(node)
        if (
            free.gpu + sum(job.spec.gpu for job, _ in candidates) < spec.gpu
            or free.cpu + sum(job.spec.cpu for job, _ in candidates) < spec.cpu
            or free.memory + sum(job.spec.memory for job, _ in candidates) < spec.memory
        ):
            continue
        if best is not None and _cannot_beat(best[0], spec, free, candidates):
            continue
        victims = _victims_on_node(claims, preemptor, node, candidates)
        if not victims:
            continue
        score = _node_score(node, victims)
        if best is None or score < best[0]:
            best = (score, node, victims)
    return None if best is None else (best[1], best[2])


def _cannot_beat(
    best: tuple[int, int, int, float, int], spec: JobSpec, free: Resources, candidates: list[Pod]
) -> bool:
    """Would this node's victims score worse than `best`, whichever they are? Each victim
    frees at most its pod's request and none is below the lowest candidate priority, so
    the pod needs at least `need` of them (what is missing over what one pod frees, per
    resource; a pod fits only where that much is free, `fit_on_node`): the score is at
    least (lowest, need x lowest, need, …). Where it equals that, every victim has the
    lowest priority, so the earliest start among them is no later than the latest of the
    lowest-priority candidates': the score is at least (lowest, need x lowest, need,
    -that latest start). A tie goes to the lower node, and `best` came from one: skipping
    a node whose bound is not below `best` changes no choice."""
    low = min(job.spec.priority for job, _ in candidates)
    if low < 0:
        return False
    need = 1
    for missing, most in (
        (spec.gpu - free.gpu, max(job.spec.gpu for job, _ in candidates)),
        (spec.cpu - free.cpu, max(job.spec.cpu for job, _ in candidates)),
        (spec.memory - free.memory, max(job.spec.memory for job, _ in candidates)),
    ):
        if missing > 0:
            if most <= 0:
                return False  # cannot be met at all: left to the full check
            need = max(need, -(-missing // most))
    latest = max((job.first_start or 0.0) for job, _ in candidates if job.spec.priority == low)
    return (low, need * low, need, -latest) >= best[:4]


PRIORITY_KILL = Policy(
    name="priority-kill",
    phases=(enqueue, pk_allocate, pk_preempt, pk_close),
    description="kube-scheduler style: per-pod priority preemption on one node, plain kill",
    defaults=baseline_defaults,
)
