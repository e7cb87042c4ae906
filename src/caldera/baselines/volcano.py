"""`volcano`: Volcano with preempt and reclaim enabled (its CI configuration), BASELINES.md.

Points V1–V9 are BASELINES.md's numbered points for `volcano`; the phases cite them.
  V1. A cycle on a snapshot; pipelined placements are dropped when it ends. Cadence: Volcano
      loops every 1 s; the simulator runs a cycle at every event instant. Between events the
      snapshot does not change, and nothing Volcano decides depends on the clock itself, so
      a 1 s loop would repeat the same answer — with one exception: jobs bound in a cycle
      are no victims in that cycle, but are in the next. So when a cycle starts a job that a
      job still starving could take, `volcano_close` asks for a cycle 1 s later (a wake-up).
      Decisions come up to 1 s earlier than Volcano's; otherwise the cadences agree.
  V2. Queue deserved by water-filling, share = max over resources (`proportion`).
  V3. Order: queues by share ascending; jobs by priority descending, then not-ready first,
      then creation time; tasks by index (all of a job's tasks are alike here).
  V4. Allocate: a queue whose allocation reaches deserved in every resource is skipped; each
      task must keep the queue within deserved; it goes to the best node with idle room for
      it (binpack score), else it is pipelined onto room being released; a gang whose task
      fits nowhere is given up. A job binds only when ready (running + placed) reaches
      `min_available`; pipelined room is held only until the cycle ends.
  V5. Starving = ready + pipelined < `min_available`: only starving jobs preempt or reclaim.
  V6. Preempt, inside a queue: per pending task of a starving job (not `Never`), nodes by
      descending score, one node per task; victims are running tasks of strictly
      lower-priority jobs of the same queue, never kube-system or system-critical; the gang
      minimum of victims is NOT protected; victims in order: lower job priority, then ready
      jobs first, then the newest task; evict one at a time until the task fits on that node;
      keep the job's evictions only if the whole job becomes placeable (pipelined), else roll
      back (the Statement).
  V7. Reclaim, across queues: starving jobs of queues below deserved take running tasks of
      other queues not marked `reclaimable: false`, but only tasks above the victim job's
      `min_available` (the gang check in the first tier settles it, the deserved check of
      the victim's queue is never reached); nodes in plain order; same greedy eviction.
  V8. A victim gets the 30 s grace period and no checkpoint signal; the preemptor gets no
      reservation across cycles (see `baseline_defaults`; nothing here nominates).
  V9. No throttle, no dynamic weight, no cost- or progress-aware victim order, no cooldown.

`volcano-seed001` (`VOLCANO_SEED_001`) is the same scheduler configured as seed 001 is
(actions enqueue, allocate, preempt, reclaim, backfill; priority, gang, conformance, drf,
predicates, proportion and nodeorder in ONE tier): points S1-S4 below `_victims_on` say what
that changes, each citing Volcano's source. Everything else is as above.

Modelling choices (docs/baselines.md says more):
- Node score is binpack on GPUs (the configuration GPU clusters run); ties by node index.
  (`volcano-seed001` scores nodes as seed 001's nodeorder does instead: S4.)
- A hard topology constraint is honoured as Volcano's network-topology (hypernode) mode: a
  gang's tasks go inside one tier-N domain; preempt and reclaim try one domain at a time,
  the one with the most room first.
- Volcano's enqueue gate (overcommit) is not modelled: every pending job within its queue's
  capability is Inqueue. Its backfill action only places pods that request nothing, which
  no job here is, so it is left out.
- ValidateVictims is kept: a node with no eligible victim is never a preempt/reclaim target,
  even if it has room.
- Reclaim works a job at a time (all its tasks) where Volcano round-robins single tasks over
  queues; the outcome for one job is the same, the interleaving between jobs is not.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

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
    rerun_after_change,
    running_with_missing,
)
from caldera.baselines.ledger import RunningLedger, ledger_for
from caldera.baselines.proportion import EPSILON, QueueShare, Vector, water_fill
from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.enqueue import enqueue
from caldera.core.placement import fit_on_node
from caldera.core.policy import Policy
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.model import GPU_MILLI, JobSpec, JobState, Node, Queue

__all__ = [
    "VOLCANO",
    "VOLCANO_SEED_001",
    "nodeorder_place",
    "nodeorder_score",
    "victim_order",
    "volcano_allocate",
    "volcano_close",
    "volcano_job_order",
    "volcano_preempt",
    "volcano_reclaim",
]

_SESSION = "volcano.session"

Pod = tuple[JobView, int]
"""A running task: its job and its index in the job's running placement."""

Scope = Sequence[int] | None
"""Nodes a job's tasks must stay on (one hard-topology domain), or None for anywhere."""


@dataclass
class _Session:
    """Volcano's session for one cycle: rooms, queue attributes, the statement, job status."""

    cycle: CycleContext
    future: FutureRoom
    staged: Staged  # the Statement: what-ifs kept or discarded
    evictions: StagedEvictions
    gone: set[str]
    queues: dict[str, QueueShare]
    counted: dict[str, int] = field(default_factory=dict)  # job -> tasks placed/pipelined
    victim_nodes: dict[tuple[str, str, int, bool], dict[int, int]] = field(default_factory=dict)
    # Starving jobs by (queue, priority): whole groups are skipped when they cannot preempt.
    starving: dict[tuple[str, int], list[JobView]] = field(default_factory=dict)
    one_tier: bool = False  # seed 001's configuration (`volcano-seed001`), S1-S4

    @cached_property
    def ledger(self) -> RunningLedger:
        return ledger_for(self.cycle)

    def pods_on(self, node: int) -> list[Pod]:
        """Running tasks on `node`, but those of jobs evicted whole before the session."""
        gone = self.gone
        return [pod for pod in self.ledger.pods_on(node) if pod[0].id not in gone]

    def running(self, job: JobView) -> int:
        """Ready tasks of a running job once this cycle's (staged) evictions apply."""
        return self.evictions.running(job)

    def starve(self, job: JobView) -> None:
        self.starving.setdefault((job.spec.queue, job.spec.priority), []).append(job)

    def queue_add(self, job: JobView, sign: int) -> None:
        """One task of `job` placed (+1) or evicted (-1): the queue's allocated follows."""
        share = self.queues.get(job.spec.queue)
        if share is None:
            return
        request = job.spec.task_request
        share.add(request, sign)
        self.staged.on_undo(lambda: share.add(request, -sign))

    def stage_evict(self, victim: JobView, index: int) -> None:
        """Evict one task inside the statement (Volcano's proportion deallocates it)."""
        self.evictions.stage(victim, index)
        self.queue_add(victim, -1)


def _open(cycle: CycleContext, one_tier: bool = False) -> _Session:
    """Open the session: future room, queue attributes with water-filled deserved (V2)."""
    snapshot = cycle.snapshot
    gone = set(cycle.evicted)
    # A room index of its own only while something is being released: allocate places in
    # idle room and pipelines onto future room within the same pass.
    future = FutureRoom.separate(cycle, gone)
    queues: dict[str, QueueShare] = {}

    # queue -> [allocated gpu, cpu, memory, requested gpu, cpu, memory, …]: running jobs'
    # (kept by the ledger), then the pending groups'
    held = ledger_for(cycle).held_without(gone)
    for (queue, _, _), group in cycle.eligible_groups:
        spec = group[0].spec  # one shape per group: same request per task
        tasks = sum(job.spec.tasks for job in group)
        sums = held.setdefault(queue, [0, 0, 0, 0, 0, 0, 0])
        sums[3] += spec.gpu * tasks
        sums[4] += spec.cpu * tasks
        sums[5] += spec.memory * tasks
    for name, sums in held.items():
        if name in snapshot.queues:
            share = QueueShare(snapshot.queues[name])
            share.allocated = [float(v) for v in sums[:3]]
            share.request = [float(v) for v in sums[3:6]]
            queues[name] = share
    water_fill(_capacity(snapshot.nodes), queues.values())
    staged = Staged(cycle.room, future, place=nodeorder_place if one_tier else None)
    return _Session(cycle, future, staged, StagedEvictions(staged), gone, queues, one_tier=one_tier)


_CAPACITY: dict[int, tuple[tuple[Node, ...], Vector]] = {}


def _capacity(nodes: tuple[Node, ...]) -> Vector:
    """The cluster's capacity as a vector, summed once per node tuple (runtimes keep theirs)."""
    known = _CAPACITY.get(id(nodes))
    if known is None or known[0] is not nodes:
        total = (
            float(sum(n.gpus for n in nodes) * GPU_MILLI),
            float(sum(n.cpu for n in nodes)),
            float(sum(n.memory for n in nodes)),
        )
        _CAPACITY.clear()  # one cluster at a time is the common case; never grows
        _CAPACITY[id(nodes)] = known = (nodes, total)
    return known[1]


def _session(cycle: CycleContext, one_tier: bool = False) -> _Session:
    """The cycle's session, opened by the first phase that asks (with its configuration)."""
    return cycle.memo(_SESSION, lambda: _open(cycle, one_tier))


def volcano_job_order(session: _Session, job: JobView) -> tuple[int, int, float, str]:
    """V3, jobs inside a queue: 1. priority, high first; 2. not ready first; 3. creation
    (submit) time; 4. id."""
    ready = job.state is JobState.RUNNING and session.running(job) >= job.spec.min_available
    return (-job.spec.priority, 1 if ready else 0, job.spec.submit, job.id)


def victim_order(session: _Session, pod: Pod) -> tuple[int, int, float, int, str]:
    """V6, victims: 1. lower job priority first; 2. ready jobs first; 3. newest task first
    (latest started job, then highest index); 4. job id."""
    job, index = pod
    ready = session.running(job) >= job.spec.min_available
    started = job.first_start if job.first_start is not None else 0.0
    return (job.spec.priority, 0 if ready else 1, -started, -index, job.id)


# -- V4: allocate ----------------------------------------------------------------------------


def volcano_allocate(cycle: CycleContext) -> None:
    """V3, V4, V5: queues by share, skipping overused ones; one job per turn; each job placed
    task by task, bound when ready, kept pipelined, or rolled back and marked starving."""
    session = _session(cycle)
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
            jobs.extend(running.get(name, ()))
            jobs.sort(key=lambda j: volcano_job_order(session, j), reverse=True)
            in_order[name] = jobs
        # A job that places nothing leaves every share as it was, so this queue would be
        # next again: keep its turn until a job changes its allocation.
        while jobs and not _allocate_job(session, jobs.pop(), failed):
            pass
        if jobs:
            heapq.heappush(heap, (share.share, name))


def _starving_as_is(session: _Session, job: JobView) -> bool:
    """V5 for a job nothing was placed for: ready tasks alone below `min_available`."""
    ready = session.running(job) if job.state is JobState.RUNNING else 0
    return ready < job.spec.min_available


def _scopes(session: _Session, job: JobView, room: Room) -> list[Scope]:
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


def _allocate_job(session: _Session, job: JobView, failed: set[int]) -> bool:
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


# -- V6, V7: preempt and reclaim -------------------------------------------------------------


VictimRule = Callable[[_Session, JobView, Pod], bool]
"""(session, preemptor, running task) -> may this task be a victim right now?"""

NodeOrder = Callable[[_Session, JobView, Scope], list[int]]


def _same_queue_lower(session: _Session, preemptor: JobView, pod: Pod) -> bool:
    """V6 victims: other jobs of the preemptor's queue with strictly lower priority."""
    job, _ = pod
    return (
        job.spec.queue == preemptor.spec.queue
        and job.id != preemptor.id
        and job.spec.priority < preemptor.spec.priority
    )


def _reclaimable_above_min(session: _Session, preemptor: JobView, pod: Pod) -> bool:
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


def _victim_nodes(session: _Session, job: JobView, reason: EvictReason) -> dict[int, int]:
    """Nodes holding tasks that could ever be victims for `job` in this phase (the parts of
    the rules that do not change within the cycle), with those tasks' milli-GPUs. The ledger
    keeps them from cycle to cycle; jobs evicted whole or started this cycle are taken out
    here. Once per (phase, queue, priority)."""
    spec = job.spec
    preempting = reason is EvictReason.PREEMPT
    key = (reason.value, spec.queue, spec.priority if preempting else 0, session.one_tier)
    found = session.victim_nodes.get(key)
    if found is None:
        rule = (
            _preempt_rule(spec.queue, spec.priority, session.one_tier)
            if preempting
            else _reclaim_rule(spec.queue, session.cycle.snapshot.queues)
        )
        ledger = session.ledger
        gpus, pods = ledger.victims_where(key, rule)
        out = [
            victim
            for job_id in session.gone | session.cycle.started
            if (victim := ledger.views.get(job_id)) is not None
            and not is_protected(victim)
            and rule(victim)
        ]
        if out:
            gpus, pods = dict(gpus), dict(pods)  # the ledger's own stay as they are
            for victim in out:
                for node, (_, indexes) in ledger.on_node_of(victim):
                    count = pods[node] - len(indexes)
                    if count:
                        pods[node] = count
                        gpus[node] -= victim.spec.gpu * len(indexes)
                    else:
                        del pods[node], gpus[node]
        session.victim_nodes[key] = found = gpus
    return found


def _preempt_rule(queue: str, priority: int, one_tier: bool) -> Callable[[JobView], bool]:
    """V6 victims' fixed part: the preemptor's queue, strictly lower priority; S1: under
    seed 001's single tier, only jobs above their gang minimum."""

    def rule(victim: JobView) -> bool:
        return (
            victim.spec.queue == queue
            and victim.spec.priority < priority
            and (not one_tier or len(victim.placement) > victim.spec.min_available)
        )

    return rule


def _reclaim_rule(queue: str, queues: Mapping[str, Queue]) -> Callable[[JobView], bool]:
    """V7 victims' fixed part: another, reclaimable queue; jobs above their gang minimum."""

    def rule(victim: JobView) -> bool:
        owner = queues.get(victim.spec.queue)
        return (
            victim.spec.queue != queue
            and owner is not None
            and owner.reclaimable
            and len(victim.placement) > victim.spec.min_available
        )

    return rule


def _could_hold(session: _Session, job: JobView, reason: EvictReason, scope: Scope) -> bool:
    """A quick bound: could the room that will be free plus every possible victim's GPUs in
    `scope` hold the job's missing gang at all? If not, trying is pointless."""
    spec = job.spec
    running = session.running(job) if job.state is JobState.RUNNING else 0
    need = spec.gpu * max(spec.min_available - running, 0)
    victims = _victim_nodes(session, job, reason)
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


def _by_score(session: _Session, job: JobView, scope: Scope) -> list[int]:
    """V6: nodes holding possible victims, by descending score — binpack on the room that
    will be free."""
    future = session.future.room
    nodes = set(_victim_nodes(session, job, EvictReason.PREEMPT))
    if scope is not None:
        nodes.intersection_update(scope)
    if session.one_tier:  # S4: seed 001 scores nodes with nodeorder, not binpack
        spec = job.spec
        return sorted(nodes, key=lambda n: (-nodeorder_score(future, n, spec), n))
    return sorted(nodes, key=lambda n: (future.whole[n], future.free_milli(n), n))


def _plain(session: _Session, job: JobView, scope: Scope) -> list[int]:
    """V7: nodes holding possible victims, in plain order."""
    nodes = _victim_nodes(session, job, EvictReason.RECLAIM).keys()
    return sorted(nodes if scope is None else nodes & set(scope))


def volcano_preempt(cycle: CycleContext) -> None:
    """V5, V6: starving jobs, queue by queue (share order), preempt inside their queue."""
    session = _session(cycle)
    per_queue: dict[str, list[JobView]] = {}
    for (queue, _), jobs in session.starving.items():
        if jobs[0].spec.may_preempt and _victim_nodes(session, jobs[0], EvictReason.PREEMPT):
            per_queue.setdefault(queue, []).extend(jobs)
    hopeless: set[tuple[int, str, int]] = set()
    for queue in sorted(per_queue, key=lambda q: (session.queues[q].share, q)):
        for job in sorted(per_queue[queue], key=lambda j: volcano_job_order(session, j)):
            key = (job.spec.shape, queue, job.spec.priority)
            if key in hopeless:
                continue
            if _take_room(session, job, EvictReason.PREEMPT, _same_queue_lower, _by_score):
                hopeless.clear()  # evictions may leave spare room others can use
            else:
                hopeless.add(key)


def volcano_reclaim(cycle: CycleContext) -> None:
    """V5, V7: queues by share (skipping overused ones), their starving jobs in order, take
    room back from other queues."""
    session = _session(cycle)
    per_queue: dict[str, list[JobView]] = {}
    takes_from: dict[str, bool] = {}  # queue: is there anything it could reclaim at all?
    for (queue, _), jobs in session.starving.items():
        if not jobs[0].spec.may_preempt:
            continue
        found = takes_from.get(queue)
        if found is None:
            found = takes_from[queue] = bool(_victim_nodes(session, jobs[0], EvictReason.RECLAIM))
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
            if _take_room(session, job, EvictReason.RECLAIM, _reclaimable_above_min, _plain):
                hopeless.clear()
            else:
                hopeless.add(key)
        if jobs:
            heapq.heappush(heap, (share.share, name))


def volcano_close(cycle: CycleContext) -> None:
    """V1: Volcano loops every second; ask for the cycle a second later when this one started
    a job that a job still starving could take next time (same queue and lower priority for
    preempt; another reclaimable queue for reclaim)."""
    session = _session(cycle)
    counted = session.counted
    starving = [  # one job stands for its (queue, priority) group: that is all could_take reads
        jobs[0] for jobs in session.starving.values() if any(job.id not in counted for job in jobs)
    ]
    queues = cycle.snapshot.queues

    def could_take(started: JobView, preemptor: JobView) -> bool:
        if started.spec.queue == preemptor.spec.queue:
            return started.spec.priority < preemptor.spec.priority
        owner = queues.get(started.spec.queue)
        return owner is not None and owner.reclaimable

    rerun_after_change(cycle, starving, could_take)


def _take_room(
    session: _Session,
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
    session: _Session,
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
        victims = _victims_on(session, job, node, rule, not preempting, holding)
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


def _enough(session: _Session, job: JobView, node: int, preempting: bool) -> bool:
    """Stop evicting: the task fits on the node's future room — and, in preempt, its queue
    stays within deserved (Volcano keeps preempting while the queue would be overused)."""
    spec = job.spec
    if preempting and not session.queues[spec.queue].allows(spec.task_request):
        return False
    room = session.future.room
    return fit_on_node(room, node, spec.gpu, spec.cpu, spec.memory) is not None


def _victims_on(
    session: _Session,
    job: JobView,
    node: int,
    rule: VictimRule,
    reclaiming: bool,
    holding: int = 0,
) -> list[Pod]:
    """Eligible victims on `node` in victim order. For reclaim, each victim job offers only
    its tasks above `min_available` (the gang plugin counts them down as it lists them).
    Under seed 001's single tier (S1-S3) the plugins of that tier each judge the same list
    and only the tasks all of them allow are victims."""
    victims = sorted(
        (
            pod
            for pod in session.pods_on(node)
            if not is_protected(pod[0])
            and pod[0].id not in session.gone
            and pod[0].id not in session.cycle.started  # bound this cycle: not yet a victim
            and not session.evictions.is_cut(*pod)
            and rule(session, job, pod)
        ),
        key=lambda p: victim_order(session, p),
    )
    if session.one_tier:
        allowed = _gang_allows(session, victims)
        if reclaiming:
            allowed &= _proportion_allows(session, victims)
        else:
            allowed &= _drf_allows(session, job, holding, victims)
        return [pod for i, pod in enumerate(victims) if i in allowed]
    if not reclaiming:
        return victims
    return [victims[i] for i in sorted(_gang_allows(session, victims))]


# -- seed 001's single tier (`volcano-seed001`) ------------------------------------------------
#
# Volcano asks each plugin of a tier for its victims among the same candidates and keeps the
# tasks every one of them allows (framework/session_plugins.go, Preemptable and Reclaimable:
# the intersection over the tier's plugins; the first tier with an answer decides). Volcano's
# CI configuration (`volcano`) puts priority, gang (enablePreemptable: false) and conformance
# in the first tier, so preempt asks priority and conformance only, and reclaim gang and
# conformance only. Seed 001 puts all seven plugins in one tier (caldera.k8s.devcluster_volcano
# SEED_001), so, citing Volcano v1.15.1's pkg/scheduler/plugins:
#   S1. gang judges preempt victims too (gang/gang.go, preemptableFn, registered for both
#       preempt and reclaim): a victim job keeps at least `min_available` ready tasks.
#   S2. drf judges preempt victims (drf/drf.go, preemptableFn): a task is a victim only if
#       its job's dominant share after losing it (counted down task by task) is not below the
#       preemptor job's dominant share with one more task (within 1e-6).
#   S3. proportion judges reclaim victims (proportion/proportion.go, ReclaimableFn): only
#       while the victim's queue holds more than it deserves in some resource (counted down
#       as victims are taken). drf judges reclaim only with hierarchy enabled (not here);
#       priority has no reclaim rule.
#   S4. nodes are scored by nodeorder with its default weights, not binpack (seed 001 names
#       no binpack plugin): nodeorder/nodeorder.go calculateWeight (leastrequested 1,
#       balancedresource 1, mostrequested 0) and OnSessionOpen, which builds Kubernetes'
#       NodeResourcesFit LeastAllocated over cpu and memory (weights 50/50) and
#       NodeResourcesBalancedAllocation over cpu, memory and nvidia.com/gpu
#       (k8s.io/kubernetes v1.35.3 pkg/scheduler/framework/plugins/noderesources:
#       least_allocated.go leastRequestedScore, balanced_allocation.go balancedResourceScorer,
#       resource_allocation.go: LeastAllocated counts a pod that asks for no cpu or memory as
#       100m / 200 MiB — schedutil's non-zero defaults —, BalancedAllocation counts what pods
#       ask and skips the GPU for a pod that asks for none). The other nodeorder scores (node
#       and pod affinity, taints, image locality, topology spread) are equal on every node
#       here. Both are integers 0-100: a pod goes to the node where, after it, cpu, memory
#       and GPUs are most evenly used — for GPU pods asking for little cpu, the node with the
#       fewest GPUs in use: Volcano as seed 001 runs it SPREADS GPU pods, and 8-GPU pods find
#       no whole node sooner than under binpack. Volcano picks at random among equal best
#       scores (util.SelectBestNodeAndScore); here the lowest node index wins.


_MAX_NODE_SCORE = 100  # fwk.MaxNodeScore
_NON_ZERO_CPU = 100  # schedutil.DefaultMilliCPURequest, millicores
_NON_ZERO_MEMORY = 200  # schedutil.DefaultMemoryRequest, MiB


def _least_requested(used: int, asked: int, capacity: int) -> int:
    """leastRequestedScore: the unused part after the pod, 0-100, integer arithmetic."""
    total = used + asked
    if total > capacity:
        return 0
    return (capacity - total) * _MAX_NODE_SCORE // capacity


def nodeorder_score(room: Room, index: int, spec: JobSpec) -> int:
    """S4: nodeorder's score of `index` for one pod of `spec` with seed 001's (default)
    weights: LeastAllocated (cpu, memory) + BalancedAllocation (cpu, memory, GPUs).
    Approximation: LeastAllocated counts the non-zero default for the incoming pod only, not
    for pods already on the node that ask for no cpu or memory (the room does not keep pod
    counts); at 100m of a node's cores per pod this moves no integer score below 12 pods
    on a 128-core node."""
    node = room.nodes[index]
    cpu_used = node.cpu - room.cpu[index]
    memory_used = node.memory - room.memory[index]
    least = weights = 0
    if node.cpu > 0:
        least += 50 * _least_requested(cpu_used, spec.cpu or _NON_ZERO_CPU, node.cpu)
        weights += 50
    if node.memory > 0:
        least += 50 * _least_requested(memory_used, spec.memory or _NON_ZERO_MEMORY, node.memory)
        weights += 50
    fractions: list[float] = []
    if node.cpu > 0:
        fractions.append(min((cpu_used + spec.cpu) / node.cpu, 1.0))
    if node.memory > 0:
        fractions.append(min((memory_used + spec.memory) / node.memory, 1.0))
    if spec.gpu > 0 and node.gpus > 0:
        gpu_used = sum(GPU_MILLI - free for free in room.free[index][: node.gpus])
        fractions.append(min((gpu_used + spec.gpu) / (node.gpus * GPU_MILLI), 1.0))
    std = 0.0
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    balanced = int((1 - std) * _MAX_NODE_SCORE)
    return (least // weights if weights else 0) + balanced


def nodeorder_place(
    room: Room, spec: JobSpec, within: Sequence[int] | None
) -> TaskPlacement | None:
    """S4: one pod on the best-scored node it fits (ties: lowest index), room taken.

    Whether the pod fits a node and the node's score depend only on the node's shape and
    what is free on it, and most nodes of a pool look alike (empty, or full), so each look
    is worked out once per call (`_node_state` says what it is made of)."""
    models = spec.gpu_models
    profile = spec.gpu_profile
    shapes = _node_shapes(room.nodes)
    looks: dict[tuple[object, ...], int] = {}  # node state -> score, -1: does not fit
    best = -1
    best_score = -1
    for index in within if within is not None else range(len(room.nodes)):
        if models is not None and room.nodes[index].gpu_model not in models:
            continue
        state = _node_state(room, index, shapes, profile)
        score = looks.get(state)
        if score is None:
            fits = fit_on_node(room, index, spec.gpu, spec.cpu, spec.memory, profile)
            score = -1 if fits is None else nodeorder_score(room, index, spec)
            looks[state] = score
        if score > best_score or (score == best_score and score >= 0 and index < best):
            best, best_score = index, score
    if best < 0:
        return None
    task = fit_on_node(room, best, spec.gpu, spec.cpu, spec.memory, profile)
    assert task is not None, "a node with the same state took the pod"
    room.take(task)
    return task


_SHAPES: dict[int, tuple[tuple[Node, ...], list[tuple[object, ...]]]] = {}


def _node_shapes(nodes: tuple[Node, ...]) -> list[tuple[object, ...]]:
    """Per node, what `fit_on_node` and `nodeorder_score` read of it that never changes."""
    known = _SHAPES.get(id(nodes))
    if known is None or known[0] is not nodes:
        shapes: list[tuple[object, ...]] = [
            (n.cpu, n.memory, n.gpus, n.island_size, n.slices) for n in nodes
        ]
        _SHAPES.clear()  # one cluster at a time is the common case; never grows
        _SHAPES[id(nodes)] = known = (nodes, shapes)
    return known[1]


def _node_state(
    room: Room, index: int, shapes: list[tuple[object, ...]], profile: str | None
) -> tuple[object, ...]:
    """All a pod's fit and nodeorder score on `index` depend on: the node's shape, its free
    cpu, memory and devices, whether it takes another pod, and its free slices of `profile`."""
    slices = bool(room.slices[index].get(profile)) if profile is not None else False
    return (
        shapes[index],
        room.cpu[index],
        room.memory[index],
        room.pods[index] > 0,
        tuple(room.free[index]),
        slices,
    )


def _gang_allows(session: _Session, pods: Sequence[Pod]) -> set[int]:
    """gang's preemptable/reclaimable rule: which of `pods` (by position) it allows."""
    spare: dict[str, int] = {}
    allowed: set[int] = set()
    for i, (victim, _) in enumerate(pods):
        left = spare.setdefault(victim.id, session.running(victim) - victim.spec.min_available)
        if left > 0:
            spare[victim.id] = left - 1
            allowed.add(i)
    return allowed


def _dominant(vector: Vector, total: Vector) -> float:
    """drf's calculateShare: the largest share of the cluster's capacity (helpers.Share: a
    resource the cluster lacks counts 1 when asked for, else 0)."""
    return max(
        (v / t if t > 0 else (1.0 if v > 0 else 0.0)) for v, t in zip(vector, total, strict=True)
    )


def _times(request: Vector, count: int) -> Vector:
    return (request[0] * count, request[1] * count, request[2] * count)


def _drf_allows(session: _Session, job: JobView, holding: int, pods: Sequence[Pod]) -> set[int]:
    """S2: drf's preemptable rule."""
    total = _capacity(session.cycle.snapshot.nodes)
    spec = job.spec
    mine = (float(spec.gpu), float(spec.cpu), float(spec.memory))
    preemptor = _dominant(_times(mine, holding + 1), total)
    left: dict[str, int] = {}
    allowed: set[int] = set()
    for i, (victim, _) in enumerate(pods):
        tasks = left.setdefault(victim.id, session.running(victim)) - 1
        left[victim.id] = tasks
        theirs = (float(victim.spec.gpu), float(victim.spec.cpu), float(victim.spec.memory))
        share = _dominant(_times(theirs, tasks), total)
        if preemptor < share or abs(preemptor - share) <= _DRF_DELTA:
            allowed.add(i)
    return allowed


_DRF_DELTA = 0.000001  # drf.go shareDelta


def _proportion_allows(session: _Session, pods: Sequence[Pod]) -> set[int]:
    """S3: proportion's reclaimable rule."""
    allocated: dict[str, list[float]] = {}
    allowed: set[int] = set()
    for i, (victim, _) in enumerate(pods):
        share = session.queues.get(victim.spec.queue)
        if share is None:
            continue
        held = allocated.setdefault(victim.spec.queue, list(share.allocated))
        if any(a > d + EPSILON for a, d in zip(held, share.deserved, strict=True)):
            request = victim.spec.task_request
            held[0] -= request.gpu
            held[1] -= request.cpu
            held[2] -= request.memory
            allowed.add(i)
    return allowed


VOLCANO = Policy(
    name="volcano",
    phases=(enqueue, volcano_allocate, volcano_preempt, volcano_reclaim, volcano_close),
    description="Volcano with preempt and reclaim: proportion, gang, per-task greedy victims",
    defaults=baseline_defaults,
)


def _seed_001(phase: Callable[[CycleContext], None]) -> Callable[[CycleContext], None]:
    """`phase` in a session opened with seed 001's single tier (S1-S4)."""

    def run(cycle: CycleContext) -> None:
        _session(cycle, one_tier=True)
        phase(cycle)

    run.__name__ = run.__qualname__ = f"{phase.__name__}_seed001"
    run.__doc__ = phase.__doc__
    return run


VOLCANO_SEED_001 = Policy(
    name="volcano-seed001",
    phases=(
        enqueue,
        *(
            _seed_001(p)
            for p in (volcano_allocate, volcano_preempt, volcano_reclaim, volcano_close)
        ),
    ),
    description="Volcano as seed 001 configures it: one tier, so gang and drf judge preempt "
    "victims and proportion judges reclaim victims (S1-S3); nodeorder spreads pods (S4)",
    defaults=baseline_defaults,
)
