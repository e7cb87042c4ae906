"""The working state of one cycle: a scratch room, queue usage and the decisions so far.

Phases read the snapshot and write only here. A `CycleContext` never outlives `cycle.run`.

Pending jobs travel through the phases as groups of one queue, priority and shape (see
`JobIndex`): enqueue keeps the groups that may be scheduled, allocate records the groups it
could not place (`waiting`, each from the first job that did not fit), preempt and reclaim
work through those. `eligible` flattens them for policies that go job by job; such policies
keep their own list of jobs they could not place in `unplaced`.

Split by concern, so a reader sees which is which:
- `CycleContext` itself is the working room: the free room left and what nominations and
  reservations hold of it, each queue's usage (one `QueueUsage` per queue, core/usage.py),
  the pending groups and the live plans' commitments;
- `cycle.decided` (`Decided`) is what the cycle decided so far: the decision lists that
  `decisions()` hands to the runtimes, and the tallies beside them (`started`, `evicted`,
  `evicted_gpu`, `missed`, `wakeups`, `notes`);
- `cycle.caches` (`Caches`) is what it keeps only to go faster and which decides nothing: the
  search cache (core/shortcuts/searches.py) and the per-cycle memos.
Both parts are small slotted records read by plain attribute (the core is compiled, and the
decision loop is hot): a phase that reads one often takes it into a local first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar, cast

from caldera.core.config import PolicyConfig
from caldera.core.decisions import (
    Decisions,
    Evict,
    EvictReason,
    Hold,
    Nominate,
    Release,
    Start,
    ThrottleOff,
    ThrottleOn,
    release_timing,
)
from caldera.core.jobindex import GroupKey, JobIndex
from caldera.core.room import Room, TaskPlacement
from caldera.core.shortcuts.searches import Handover, SearchCache
from caldera.core.snapshot import JobView, PendingVictim, Snapshot
from caldera.core.usage import NOTHING, QueueUsage
from caldera.model import (
    CRITICAL_PRIORITY,
    GPU_MILLI,
    JobState,
    Resources,
    deserved_shares,
)

__all__ = ["Caches", "CycleContext", "Decided", "PendingGroup"]

T = TypeVar("T")

PendingGroup = tuple[GroupKey, list[JobView]]


def _rank(job: JobView) -> tuple[int, float, str]:
    return job.spec.rank


def pending_tasks(victim: JobView, pending: PendingVictim) -> int:
    """How many of `victim`'s running tasks a plan's pending entry still takes."""
    if not pending.tasks:
        return len(victim.placement)
    wanted = set(pending.tasks)
    return sum(1 for task in victim.placement if task in wanted)


def _default_deserved(snapshot: Snapshot) -> dict[str, Resources]:
    """What each queue deserves (`caldera.model.deserved_shares`, of the cluster's GPUs and
    MIG slices, mig.py)."""
    return deserved_shares(snapshot.queues, snapshot.free_room.capacity_milli)


@dataclass(frozen=True, slots=True)
class _Commitments:
    """What the nominations' plans hold at a cycle's start: the victims they have yet to
    signal (`claimed`), what those still running will give back (`committed_by`, by victim;
    `totals`, by queue: `CycleContext.commit` for each, in the same order) and the own-queue
    victims of non-critical reclaimers (`made_way`). A function of the jobs that run or hold a
    nomination and of the queues' names, so kept with the job index until its `version`
    moves (`JobIndex.at_version`): a backlog's many timed evictions waiting would otherwise
    be committed again, victim by victim, in every cycle. Never changed: a cycle copies it."""

    claimed: frozenset[str]
    committed_by: Mapping[str, tuple[str, Resources]]
    totals: Mapping[str, Resources]
    made_way: frozenset[str]

    @classmethod
    def of(cls, index: JobIndex, queues: tuple[str, ...]) -> _Commitments:
        jobs = index.views
        claimed: set[str] = set()
        committed_by: dict[str, tuple[str, Resources]] = {}
        totals: dict[str, Resources] = {}
        made_way: set[str] = set()
        for job in index.nominated.values():
            nomination = job.nomination
            assert nomination is not None
            claimed.update(victim.job for victim in nomination.pending)
            for pending in nomination.pending:
                victim = jobs.get(pending.job)
                if victim is None or victim.state is not JobState.RUNNING:
                    continue
                count = pending_tasks(victim, pending)
                queue = victim.spec.queue
                if count == 0 or queue not in queues or victim.id in committed_by:
                    continue
                resources = victim.spec.task_request.scaled(count)
                committed_by[victim.id] = (queue, resources)
                totals[queue] = totals.get(queue, NOTHING) + resources
            if (
                nomination.reason == EvictReason.RECLAIM.value
                and job.spec.priority < CRITICAL_PRIORITY
            ):
                made_way.update(
                    victim
                    for victim in nomination.victims
                    if (v := jobs.get(victim)) is not None and v.spec.queue == job.spec.queue
                )
        return cls(frozenset(claimed), committed_by, totals, frozenset(made_way))


@dataclass(slots=True, init=False)
class Decided:
    """What the cycle decided so far: the lists `CycleContext.decisions` hands on (what the
    runtimes and the baselines' callers read), and the few tallies kept beside them so a
    phase asks "was this job started / signalled?" without walking a list. Written only
    through `CycleContext` (`start`, `evict`, ...) or a phase's own append; never read back
    into the working room. Built by hand (`__init__`) for the compiled core, as
    `CycleContext` is."""

    starts: list[Start]
    evictions: list[Evict]
    nominations: list[Nominate]
    holds: list[Hold]
    releases: list[Release]
    throttles: list[ThrottleOn | ThrottleOff]
    started: set[str]  # the jobs in `starts`
    evicted: set[str]  # the victims in `evictions`
    evicted_gpu: int  # milli-GPUs `evictions` signal (against the cycle's eviction budget)
    missed: set[str]  # searched for victims, found none (`Decisions.preempt_misses`)
    wakeups: list[float]  # times the cycle asks to run again at (`Decisions.wakeup`)
    notes: list[str]
    tasks_started: int  # tasks in `starts` (against the snapshot's `start_budget`)
    paced: bool  # a start was left for later because the budget ran out

    def __init__(self) -> None:
        self.starts = []
        self.evictions = []
        self.nominations = []
        self.holds = []
        self.releases = []
        self.throttles = []
        self.started = set()
        self.evicted = set()
        self.evicted_gpu = 0
        self.missed = set()
        self.wakeups = []
        self.notes = []
        self.tasks_started = 0
        self.paced = False


@dataclass(slots=True, init=False)
class Caches:
    """What the cycle keeps only to go faster, deciding nothing: the victim searches it need
    not run (`searches`, core/shortcuts/searches.py: the memo's failed ones, a quiet check's
    answers), values computed once per cycle (`CycleContext.memo`) and values that depend only
    on the queues' usage (`CycleContext.usage_memo`, kept until `usage_generation` moves).
    Dropping any of it changes how long a cycle takes, never what it decides."""

    searches: SearchCache
    memo: dict[str, object]
    usage_memo: dict[str, tuple[int, object]]
    # Bumped whenever a queue's usage changes (a start, an eviction, a promise): answers that
    # depend only on the usages can be kept until then.
    usage_generation: int

    def __init__(self, searches: SearchCache) -> None:
        self.searches = searches
        self.memo = {}
        self.usage_memo = {}
        self.usage_generation = 0


@dataclass(slots=True, init=False)
class CycleContext:
    """The working room of one cycle, with its two named parts: what it decided so far
    (`decided`, a `Decided`) and what it keeps only to go faster (`caches`, a `Caches`).
    The working room is the free room left (`room`, with what nominations and reservations
    hold of it in `blocked` and `reservations`), each queue's usage, the pending groups the
    phases work through and the plans' commitments. Built by hand (`__init__`): a
    dataclass's generated one stays interpreted in the compiled core (caldera/compiled.py)
    and was a twentieth of a backlog's run there."""

    snapshot: Snapshot
    room: Room
    jobs: Mapping[str, JobView]
    usage: dict[str, QueueUsage]
    eligible_groups: list[PendingGroup]
    waiting: list[tuple[PendingGroup, int]]
    unplaced: list[JobView]
    blocked: dict[str, list[TaskPlacement]]
    reservations: dict[str, list[TaskPlacement]]
    claimed: set[str]  # victims a live plan has yet to signal
    # Of those, the ones still running: their queue and what they will give back (`commit`).
    committed_by: dict[str, tuple[str, Resources]]
    # Own-queue victims of a non-critical reclaimer still waiting for its room: they may start
    # again only within their queue's deserved share (`may_return`).
    made_way: set[str]
    # Which pending groups the current pass of allocate/preempt/reclaim serves (None: all).
    pass_filter: Callable[[GroupKey], bool] | None
    waiting_seen: dict[str, int]  # per phase: entries done
    # Waiting heads that reached a give_way phase's back-off check -> those phases, in order
    # (what a record of a quiet cycle needs, core/shortcuts/quiet.py).
    reached: dict[str, list[str]]
    _budget: int  # milli-GPUs a cycle may signal (config × capacity)
    decided: Decided
    caches: Caches

    def __init__(self, snapshot: Snapshot, room: Room) -> None:
        self.snapshot = snapshot
        self.room = room
        self.decided = Decided()
        self.caches = Caches(SearchCache(snapshot))
        self.eligible_groups = []
        self.waiting = []
        self.unplaced = []
        self.blocked = {}
        self.reservations = {}
        self.claimed = set()
        self.committed_by = {}
        self.made_way = set()
        self.pass_filter = None
        self.waiting_seen = {}
        self.reached = {}
        self._budget = self._whole_budget()
        self.jobs = snapshot.by_id
        deserved = _default_deserved(snapshot)
        held = snapshot.job_index.usage
        self.usage = {}
        for name, queue in snapshot.queues.items():
            gpu, cpu, memory, gpu_out, cpu_out, memory_out = held.get(name, (0, 0, 0, 0, 0, 0))
            holding = Resources(gpu, cpu, memory)
            leaving = (
                Resources(gpu_out, cpu_out, memory_out)
                if gpu_out or cpu_out or memory_out
                else NOTHING
            )
            self.usage[name] = QueueUsage(queue, deserved[name], holding, leaving, holding)
        for usage in self.usage.values():
            above = usage.queue.parent
            department = self.usage.get(above) if above is not None else None
            if department is not None:
                usage.parent = department
                department.children = (*department.children, usage)
        index = snapshot.job_index
        for job in index.nominated.values():
            self.promise(job, 1)
        names = tuple(self.usage)
        commitments = index.at_version(
            ("commitments", names), lambda: _Commitments.of(index, names)
        )
        self.claimed = set(commitments.claimed)
        self.committed_by = dict(commitments.committed_by)
        for name, total in commitments.totals.items():
            usage = self.usage[name]
            usage.committed = usage.committed + total
        self.caches.usage_generation += len(commitments.committed_by)
        self.made_way = set(commitments.made_way)

    @property
    def undecided(self) -> bool:
        """Nothing started, signalled or nominated yet: the state the cycle began with."""
        decided = self.decided
        return not (decided.starts or decided.evictions or decided.nominations)

    def hand_over(self, names: tuple[str, ...]) -> Handover:
        """This cycle's searches so far and its memos `names` (those it has), for the phases
        of a cycle on the same snapshot."""
        caches = self.caches
        memo = {name: caches.memo[name] for name in names if name in caches.memo}
        return Handover(list(caches.searches.log or ()), memo)

    def take_over(self, handover: Handover) -> None:
        """Start from what a quiet check on the same snapshot found (`hand_over`)."""
        self.caches.searches.known = list(handover.searches)
        self.caches.memo.update(handover.memo)

    def memo(self, name: str, build: Callable[[], T]) -> T:
        """A value computed once per cycle and shared between phases."""
        memo = self.caches.memo
        if name not in memo:
            memo[name] = build()
        return cast(T, memo[name])

    def usage_memo(self, name: str, build: Callable[[], T]) -> T:
        """A value that depends only on the queues' usage: computed once, again after any
        start, eviction or promise (`usage_generation`)."""
        caches = self.caches
        entry = caches.usage_memo.get(name)
        if entry is None or entry[0] != caches.usage_generation:
            entry = caches.usage_memo[name] = (caches.usage_generation, build())
        return cast(T, entry[1])

    @property
    def eligible(self) -> list[JobView]:
        """Every pending job enqueue admitted, in rank order (for job-by-job policies)."""
        return self.memo(
            "eligible",
            lambda: sorted((j for _, jobs in self.eligible_groups for j in jobs), key=_rank),
        )

    def in_pass(self, key: GroupKey) -> bool:
        return self.pass_filter is None or self.pass_filter(key)

    def out_of_starts(self, priority: int) -> bool:
        """The snapshot's `start_budget` is spent and a job of `priority` waits for the next
        cycle (a critical one never does); the decisions say the cycle was paced. Checked
        before a start, so one gang larger than what is left still starts."""
        budget = self.snapshot.start_budget
        decided = self.decided
        if budget is None or priority >= CRITICAL_PRIORITY or decided.tasks_started < budget:
            return False
        decided.paced = True
        return True

    @property
    def now(self) -> float:
        return self.snapshot.now

    @property
    def config(self) -> PolicyConfig:
        return self.snapshot.config

    @property
    def eviction_budget(self) -> int:
        """Milli-GPUs that may still be signalled this cycle (at least one node's worth)."""
        return self._budget - self.decided.evicted_gpu

    def _whole_budget(self) -> int:
        room = self.room
        limit = max(self.config.eviction_budget * room.capacity_gpus, room.max_gpus)
        slices = room.capacity_milli - room.capacity_gpus * GPU_MILLI  # MIG slices' share
        return int(limit * GPU_MILLI) + int(self.config.eviction_budget * slices)

    def commit(self, victim: JobView, pending: PendingVictim) -> None:
        """Count what a victim a live plan has yet to signal will give back as leaving its
        queue (`QueueUsage.kept`): a reclaim decided later in the cycle, or in a later one
        before that victim is signalled, must not count it as the queue's (DESIGN §4.1 step 1:
        a victim queue loses a job only while above its deserved share)."""
        count = pending_tasks(victim, pending)
        usage = self.usage.get(victim.spec.queue)
        if count == 0 or usage is None or victim.id in self.committed_by:
            return
        resources = victim.spec.task_request.scaled(count)
        self.committed_by[victim.id] = (victim.spec.queue, resources)
        usage.committed = usage.committed + resources
        self.caches.usage_generation += 1

    def uncommit(self, victim_id: str) -> None:
        """The victim is signalled (it then counts as releasing) or left out of its plan."""
        entry = self.committed_by.pop(victim_id, None)
        if entry is not None:
            usage = self.usage[entry[0]]
            usage.committed = usage.committed - entry[1]
            self.caches.usage_generation += 1

    def may_return(self, job: JobView) -> bool:
        """May `job`, pending again, start now? A reclaim keeps its preemptor's queue within
        its deserved share (DESIGN §4.1 step 1) counting the queue's own victims of the plan
        as gone: one released at once (nothing to lose) must not start again beside the
        preemptor while that plan waits, unless the share still holds with it."""
        if job.id not in self.made_way:
            return True
        return self.usage[job.spec.queue].within_deserved(job.spec.gang_request)

    def promise(self, job: JobView, sign: int) -> None:
        """Count (+1) or stop counting (-1) a nominated preemptor's gang in its queue."""
        self.caches.usage_generation += 1
        usage = self.usage.get(job.spec.queue)
        if usage is not None:
            gang = job.spec.gang_request
            usage.promised = usage.promised + gang if sign > 0 else usage.promised - gang

    def start(self, job: JobView, placement: tuple[TaskPlacement, ...], grow: bool = False) -> None:
        """Record a start; the room is already taken by the caller."""
        decided = self.decided
        decided.starts.append(Start(job.id, placement, grow))
        decided.started.add(job.id)
        decided.tasks_started += len(placement)
        self.caches.usage_generation += 1
        usage = self.usage.get(job.spec.queue)
        if usage is not None:
            usage.allocated = usage.allocated + job.spec.task_request.scaled(len(placement))

    def extend_start(self, job: JobView, extra: tuple[TaskPlacement, ...]) -> None:
        """Add tasks to a start decided earlier in this cycle (one start per job and cycle);
        the room is already taken by the caller."""
        starts = self.decided.starts
        for number, start in enumerate(starts):
            if start.job == job.id:
                starts[number] = Start(job.id, start.placement + extra, start.grow)
                break
        else:
            raise ValueError(f"{job.id} was not started in this cycle")
        self.decided.tasks_started += len(extra)
        self.caches.usage_generation += 1
        usage = self.usage.get(job.spec.queue)
        if usage is not None:
            usage.allocated = usage.allocated + job.spec.task_request.scaled(len(extra))

    def evict(self, evict: Evict, victim: JobView) -> None:
        """Record an eviction, with when its room comes back (`Evict.release_at`)."""
        delay, saves = release_timing(victim.spec, self.config)
        evict = replace(evict, release_at=self.now + delay, checkpoint=saves)
        decided = self.decided
        decided.evictions.append(evict)
        decided.evicted.add(victim.id)
        decided.evicted_gpu += evict.gpu
        self.caches.usage_generation += 1
        usage = self.usage.get(victim.spec.queue)
        if usage is not None:
            tasks = len(evict.tasks) if evict.tasks else len(victim.placement)
            usage.releasing = usage.releasing + victim.spec.task_request.scaled(tasks)

    def block(self, job_id: str, placement: tuple[TaskPlacement, ...]) -> None:
        """Keep the free part of a reserved placement away from everyone else this cycle."""
        self.blocked.setdefault(job_id, []).extend(self._hold(placement))

    def reserve(self, job_id: str, placement: tuple[TaskPlacement, ...]) -> None:
        """Keep free room for a starving large job (DESIGN §4.4) away from everyone else this
        cycle. Unlike a nomination's, the job may still search for victims."""
        self.reservations.setdefault(job_id, []).extend(self._hold(placement))

    def unreserve(self, job_id: str) -> tuple[TaskPlacement, ...]:
        """Give a reservation's room back; returns what it held."""
        parts = tuple(self.reservations.pop(job_id, ()))
        for part in parts:
            self.room.give(part)
        return parts

    def hold_again(self, job_id: str, parts: tuple[TaskPlacement, ...], reservation: bool) -> None:
        """Take exactly the room an earlier cycle held for `job_id` — its nomination's free
        part (`block`) or its reservation (`reserve`): how core/shortcuts/quiet.py rebuilds
        the working room of a cycle like that one."""
        for part in parts:
            self.room.take(part)
        held = self.reservations if reservation else self.blocked
        held.setdefault(job_id, []).extend(parts)

    def _hold(self, placement: tuple[TaskPlacement, ...]) -> list[TaskPlacement]:
        held: list[TaskPlacement] = []
        room = self.room
        for task in placement:
            free = room.free[task.node]
            devices = tuple(d for d in task.devices if free[d] >= task.milli)
            if (not devices and task.devices) or room.pods[task.node] < 1:
                continue
            whole = len(devices) == len(task.devices)
            cpu = task.cpu if whole and room.cpu[task.node] >= task.cpu else 0
            memory = task.memory if whole and room.memory[task.node] >= task.memory else 0
            if whole and cpu == task.cpu and memory == task.memory:
                part = task  # all of it is free: the task itself (immutable), not a copy
            else:
                part = TaskPlacement(task.node, devices, task.milli, cpu, memory)
            room.take(part)
            held.append(part)
        return held

    def decisions(self) -> Decisions:
        decided = self.decided
        wakeups = [t for t in decided.wakeups if t > self.now]
        return Decisions(
            starts=tuple(decided.starts),
            evictions=tuple(decided.evictions),
            nominations=tuple(decided.nominations),
            holds=tuple(decided.holds),
            releases=tuple(decided.releases),
            throttles=tuple(decided.throttles),
            preempt_misses=tuple(sorted(decided.missed - self.blocked.keys() - decided.started)),
            wakeup=min(wakeups) if wakeups else None,
            notes=tuple(decided.notes),
            memo=self.caches.searches.memo(),
            paced=decided.paced,
        )
