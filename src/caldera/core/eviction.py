"""Shared driver of phases 3 (preempt) and 4 (reclaim): turn victim plans into evictions.

For each job allocate could not place, highest priority first: if it already holds a
nomination, keep signalling the victims its plan still needs (within the budget); otherwise
ask the phase for a plan, evict it (two-phase, graceful) and nominate the room for the
preemptor. Debug jobs (policy Never) never get here.

`VictimPools` builds, once per phase and preemptor group, the two kinds of candidates of
DESIGN §4.1 step 1: the preemptor's own queue's lower-priority work (preempt) and the room
other queues borrowed (reclaim), each as a `VictimIndex`.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Mapping, Sequence

from caldera.core.allocate import job_order
from caldera.core.backoff import back_off_ends
from caldera.core.context import CycleContext, QueueUsage
from caldera.core.decisions import Evict, EvictReason, Nominate
from caldera.core.defrag import packed_plan
from caldera.core.estimates import expected_end, slo_deadline
from caldera.core.jobindex import GroupKey, group_key
from caldera.core.packing import count_started, packing_load
from caldera.core.placement import place_job
from caldera.core.room import TaskPlacement
from caldera.core.snapshot import JobView, Nomination, PendingVictim
from caldera.core.timing import next_signal, signal_times
from caldera.core.victims import (
    Enough,
    Plan,
    Unit,
    Veto,
    VictimIndex,
    devices_held,
    find_plan,
    is_protected,
    never_fits,
    victim_units,
)
from caldera.core.weight import effective_weight
from caldera.model import CRITICAL_PRIORITY, JobState, Resources

__all__ = [
    "SNAPSHOT_MEMOS",
    "FloorVeto",
    "Planner",
    "VictimPools",
    "VictimsByQueue",
    "continue_nominations",
    "fits_on_free_room",
    "give_way",
    "hopeless",
    "over_capability",
]

VictimsByQueue = dict[str, dict[int, dict[str, JobView]]]
"""Running jobs that could ever be victims: queue -> base priority -> id -> job."""

SNAPSHOT_MEMOS = ("weights", "victim_units", "undecided pools")
"""The per-cycle memos of `VictimPools` that depend on the snapshot alone (each running job's
effective weight and victim units at the cycle's time, and the pools built while the cycle
had decided nothing): another cycle on the same snapshot may start from them
(core/shortcuts/quiet.py, 5)."""

_CEILING = ("ceiling",)
"""The shared key of the phase's list of borrowers at the ceiling (`VictimPools._ceiling`)."""

PoolKey = tuple[str, str, int, int]
"""(own, borrowers or combined; the preemptor's queue; its priority; how many of the
borrowers at the W_eff ceiling it waits for — `VictimPools.waits_for`)."""

SharedKey = PoolKey | tuple[str, str, str, int, int] | tuple[str]
"""A pool, or ("chosen", own or borrowers, queue, priority): the candidates picked for it."""

Candidates = tuple[list[JobView], list[JobView]]
"""A pool's candidates, and (own pools) its queue's lower-priority jobs passed over."""

Planner = Callable[[JobView, "VictimPools"], Plan | None]
"""(preemptor, the phase's pools) -> the phase's best plan for it, or None."""


def _wait_for_a_cheaper_plan(cycle: CycleContext, job: JobView, plan: Plan) -> bool:
    """Every plan right now destroys work: a non-critical preemptor that has waited less
    than `lossy_patience` since it was submitted waits (backs off) for victims that can
    checkpoint or finish, rather than throw GPU-hours away (DESIGN goal 3)."""
    patience = cycle.config.lossy_patience
    if patience <= 0 or job.spec.priority >= CRITICAL_PRIORITY:
        return False
    if plan.cost.lost <= 0:
        return False
    return cycle.now - job.spec.submit < patience


def patience(cycle: CycleContext, job: JobView) -> float | None:
    """How long a critical preemptor can wait for its victims and still start within its
    SLO ("critical work starts fast"); None for other jobs or once the SLO is missed."""
    if job.spec.priority < CRITICAL_PRIORITY:
        return None
    slo = cycle.config.slo.get(job.spec.type.value)
    if slo is None:
        return None
    left = job.spec.submit + slo - cycle.now
    return left if left >= 0 else None


def over_capability(usage: QueueUsage, extra: Resources) -> Resources | None:
    """By how much `extra` would take the queue over its capability or its department over
    the department's, the larger of the two in each resource: the queue's own victims free
    room under both (None: it would not)."""
    if usage.within_capability(extra):
        return None
    levels = [(usage.queue.capability, usage.allocated + usage.promised + extra)]
    parent = usage.parent
    if parent is not None:  # the department's cap may stand in the way too
        levels.append((parent.queue.capability, parent.tree_capped(extra)))
    over = [0, 0, 0]
    for cap, total in levels:
        if cap is None:
            continue
        for i, (held, limit) in enumerate(
            ((total.gpu, cap.gpu), (total.cpu, cap.cpu), (total.memory, cap.memory))
        ):
            if limit > 0:
                over[i] = max(over[i], held - limit)
    return Resources(*over)


def freed_by(units: Sequence[Unit], queue: str) -> Resources:
    """What the units of `queue` give back to its quotas. A job's units overlap (its whole
    gang and each task above `min_available`): a task counts once."""
    gpu = cpu = memory = 0  # summed as integers: asked for every prefix a search tries
    counted: set[tuple[str, int]] = set()
    for unit in units:
        if unit.queue == queue:
            new = [(unit.job.id, i) for i in unit.tasks if (unit.job.id, i) not in counted]
            counted.update(new)
            request, tasks = unit.job.spec.task_request, len(new)
            gpu += request.gpu * tasks
            cpu += request.cpu * tasks
            memory += request.memory * tasks
    return Resources(gpu, cpu, memory)


def frees(queue: str, need: Resources) -> Enough:
    """Do victims of `queue` among the units free at least `need`?"""

    def enough(units: Sequence[Unit]) -> bool:
        freed = freed_by(units, queue)
        return freed.gpu >= need.gpu and freed.cpu >= need.cpu and freed.memory >= need.memory

    return enough


class VictimPools:
    """Candidate victims of one phase, per preemptor group (queue, priority), cheapest first.

    - `own(P)`: running jobs of P's queue with base priority and effective weight below P's
      priority (preempt; equal priorities never preempt each other);
    - `borrowers(P)`: running jobs of other queues that are reclaimable and above their
      deserved share, whatever their priority (reclaim) — but a job whose effective weight
      escalated to the ceiling stays out of a non-critical preemptor's reach while it is
      expected to end before P's start SLO runs out (DESIGN §4.1, `waits_for`);
    - `combined(P)`: both, borrowers first.
    Never: jobs signalled this cycle or promised to another plan, jobs evicted within the
    cooldown (unless P is critical); `VictimIndex` skips jobs evicted meanwhile on reading.
    """

    def __init__(self, cycle: CycleContext) -> None:
        self.cycle = cycle
        self._indexes: dict[PoolKey, VictimIndex] = {}
        # Candidates chosen (for a count) before their index was needed: the index is built
        # from this list later, so it holds what it would have held if built then.
        self._chosen: dict[PoolKey, Candidates] = {}
        # Per cycle (the clock is the cycle's): each running job's weight and units.
        self._weights: dict[str, float] = cycle.memo(SNAPSHOT_MEMOS[0], dict)
        self._units_of: dict[str, list[Unit]] = cycle.memo(SNAPSHOT_MEMOS[1], dict)
        # Pools and chosen candidates made while the cycle had decided nothing: a function
        # of the snapshot alone (nothing signalled, claimed, started or promised yet changes
        # candidacy or a queue's usage), so every phase of the cycle — and the phases after a
        # quiet check on the same snapshot — may take them while they too decided nothing.
        self._undecided: dict[SharedKey, object] = cycle.memo(SNAPSHOT_MEMOS[2], dict)
        # The borrowers escalated to the ceiling, by expected end, and their ids (`_ceiling`).
        self._escalated: tuple[list[tuple[float, str]], frozenset[str]] | None = None
        self._waits: dict[str, int] = {}  # `waits_for`, per preemptor

    def _shared(self, key: SharedKey) -> object | None:
        """What an undecided phase of this cycle made under `key`, while still undecided."""
        return self._undecided.get(key) if self.cycle.undecided else None

    def _share(self, key: SharedKey, value: object) -> None:
        """Keep what was just made for the cycle's other phases, if nothing is decided yet
        (making it decides nothing)."""
        if self.cycle.undecided:
            self._undecided.setdefault(key, value)

    def _pool(self, key: PoolKey, build: Callable[[], VictimIndex]) -> VictimIndex:
        """This phase's pool under `key`: made before in this phase, shared by an undecided
        one, or `build()` now."""
        index = self._indexes.get(key)
        if index is None:
            index = self._shared_index(key)
            if index is None:
                index = build()
            self._indexes[key] = index
            self._share(key, index)
        return index

    def _shared_index(self, key: PoolKey) -> VictimIndex | None:
        """The pool an undecided phase of this cycle built under `key`, if any."""
        shared = self._shared(key)
        return shared if isinstance(shared, VictimIndex) else None

    def own(self, job: JobView) -> VictimIndex:
        return self._index("own", job)

    def borrowers(self, job: JobView) -> VictimIndex:
        return self._index("borrowers", job)

    def combined(self, job: JobView) -> VictimIndex:
        queue = job.spec.queue
        # Both parts are this phase's pools even when the combined one is shared: a phase
        # after a quiet check then holds the same pools, once it has decided something, as
        # the phases without the check (core/shortcuts/quiet.py, 5).
        own, borrowers = self.own(job), self.borrowers(job)

        def build() -> VictimIndex:
            units = [*own.units, *borrowers.units]
            return VictimIndex(units, lambda u: int(u.queue == queue))

        return self._pool(self._key("combined", job), build)

    def own_never_fits(self, job: JobView) -> bool:
        """Would every search among `own(job)` fail, even taking all of it? `victims.never_fits`
        on the GPU devices its candidates hold, counted from the candidates alone — without
        their units, keys and order, the costly part of an index. Sharper than `hopeless`,
        which counts every lower-priority job: a large preemptor's queue is full of normal
        jobs of which those escalated to the ceiling, in their cooldown or promised to another
        plan are no candidates. False when it cannot tell."""
        return never_fits(self.cycle.room, job.spec, self.devices("own", job))

    def empty(self, kind: str, job: JobView) -> bool:
        """Has `kind`'s pool for `job` no candidate (every job gives at least one unit)? Told
        from the candidate list, kept for the pool, without building it: in the 10k burst
        18,387 of 20,020 reclaim searches over the borrowers had none (no queue above its
        share). Counting the devices of a non-empty list (as `own_never_fits` does) settled
        none of the others there, and cost more than it saved."""
        index = self._built(kind, job)
        if index is not None:
            return not index.units
        return not self._chosen_for(kind, job)[0]

    def devices(self, kind: str, job: JobView) -> dict[int, int]:
        """Node -> GPU devices the live candidates of `kind`'s pool for `job` use there."""
        index = self._built(kind, job)
        if index is not None:
            return index.devices(self.cycle.evicted)
        chosen, passed_over = self._chosen_for(kind, job)
        if kind == "own":
            return self._own_devices(job, passed_over)
        return devices_held(chosen, self.cycle.evicted)

    def _own_devices(self, job: JobView, passed_over: list[JobView]) -> dict[int, int]:
        """`devices` of the own pool, from the job index's count of every lower-priority job
        of the queue (kept across cycles) less the few not chosen or evicted since: a
        large preemptor's queue holds ~1,600 candidates and passes over a handful."""
        spec, cycle = job.spec, self.cycle
        index = cycle.snapshot.job_index
        gone = {victim.id: victim for victim in passed_over}
        by_priority = index.victims.get(spec.queue, {})
        for victim_id in cycle.evicted:  # chosen, then evicted: no longer a candidate
            victim = cycle.jobs.get(victim_id)
            if victim is None or victim_id in gone or victim.spec.priority >= spec.priority:
                continue
            held = by_priority.get(victim.spec.priority, {}).get(victim_id)
            if held is not None:
                gone[victim_id] = held
        devices = dict(index.lower_devices(spec.queue, spec.priority))
        for node, count in devices_held(gone.values(), set()).items():
            left = devices[node] - count
            if left:
                devices[node] = left
            else:
                del devices[node]
        return devices

    def _built(self, kind: str, job: JobView) -> VictimIndex | None:
        """`kind`'s pool for `job` if this phase or an undecided one has built it."""
        key = self._key(kind, job)
        index = self._indexes.get(key)
        return index if index is not None else self._shared_index(key)

    def _chosen_for(self, kind: str, job: JobView) -> Candidates:
        """The candidates of `kind`'s pool for `job`, chosen now if not before (kept for the
        index), with those passed over."""
        key = self._key(kind, job)
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = self._candidates(kind, job)
        return chosen

    def _candidates(self, kind: str, job: JobView) -> Candidates:
        """`_own_jobs` or `_borrowed_jobs`, or what an undecided phase of this cycle chose."""
        key = ("chosen", *self._key(kind, job))
        shared = self._shared(key)
        if isinstance(shared, tuple):
            return shared
        chosen = self._own_jobs(job) if kind == "own" else (self._borrowed_jobs(job), [])
        self._share(key, chosen)
        return chosen

    def _index(self, kind: str, job: JobView) -> VictimIndex:
        key = self._key(kind, job)

        def build() -> VictimIndex:
            chosen = self._chosen.pop(key, None)
            jobs = (self._candidates(kind, job) if chosen is None else chosen)[0]
            return VictimIndex([unit for victim in jobs for unit in self._units(victim)])

        return self._pool(key, build)

    def _key(self, kind: str, job: JobView) -> PoolKey:
        spec = job.spec
        return (kind, spec.queue, spec.priority, 0 if kind == "own" else self.waits_for(job))

    def _ceiling(self) -> tuple[list[tuple[float, str]], frozenset[str]]:
        """The running jobs of queues that lend room (reclaimable, above their deserved share)
        whose effective weight escalated to the ceiling, by (expected end, id), and their ids:
        made once per phase (shared while the cycle is undecided), the same for every
        preemptor, so that how many of them a preemptor waits for names the ones it waits
        for. A queue that starts lending only later in the phase is not in it: its escalated
        jobs are waited for, as before issue 37 (`_borrowed_jobs`)."""
        if self._escalated is None:
            shared = self._shared(_CEILING)
            if isinstance(shared, tuple):
                self._escalated = shared
                return shared
            cycle = self.cycle
            config, now, estimates = cycle.config, cycle.now, cycle.snapshot.estimates
            ceiling = config.ceiling
            found: list[tuple[float, str]] = []
            for queue, by_priority in cycle.snapshot.job_index.victims.items():
                usage = cycle.usage.get(queue)
                if usage is None or not usage.queue.reclaimable:
                    continue
                if not usage.over_deserved(usage.kept):
                    continue
                for value, jobs in by_priority.items():
                    if value >= ceiling:
                        continue
                    for victim in jobs.values():
                        if ceiling <= self.weight(victim):
                            found.append((expected_end(victim, estimates, now), victim.id))
            found.sort()
            self._escalated = (found, frozenset(victim for _, victim in found))
            self._share(_CEILING, self._escalated)
        return self._escalated

    def waits_for(self, job: JobView) -> int:
        """How many borrowers at the W_eff ceiling (the first of `_ceiling`) preemptor `job`
        waits for rather than reclaims (DESIGN §4.1): those expected to end before its start
        SLO runs out — none once it has run out, all if its type has no SLO. A critical
        preemptor waits for none."""
        spec = job.spec
        if spec.priority >= CRITICAL_PRIORITY:
            return 0
        escalated = self._ceiling()[0]
        if not escalated:
            return 0
        known = self._waits.get(job.id)
        if known is None:
            known = self._waits[job.id] = self._count_waited(job, escalated)
        return known

    def _count_waited(self, job: JobView, escalated: list[tuple[float, str]]) -> int:
        spec = job.spec
        deadline = slo_deadline(spec, self.cycle.config)
        if deadline is None:
            return len(escalated)
        if deadline < self.cycle.now:
            return 0
        return bisect.bisect_right(escalated, (deadline, "\U0010ffff"))

    def _own_jobs(self, job: JobView) -> Candidates:
        """The candidate rules (not signalled or promised, not cooling down) and `weight`
        written out: a large job's queue holds ~1,600 lower priority jobs in a 6,500-GPU
        backlog, each looked at whenever this pool is made. The jobs passed over too."""
        cycle, priority = self.cycle, job.spec.priority
        by_priority = cycle.snapshot.job_index.victims.get(job.spec.queue, {})
        evicted, claimed, weights = cycle.evicted, cycle.claimed, self._weights
        config, now = cycle.config, cycle.now
        cooldown, critical = config.cooldown, priority >= CRITICAL_PRIORITY
        found: list[JobView] = []
        passed_over: list[JobView] = []
        for value, jobs in by_priority.items():
            if value >= priority:
                continue
            for victim in jobs.values():
                victim_id = victim.id
                if victim_id in evicted or victim_id in claimed:
                    passed_over.append(victim)
                    continue
                last = victim.last_evicted_at
                if last is not None and not critical and now - last < cooldown:
                    passed_over.append(victim)
                    continue  # in its cooldown
                weight = weights.get(victim_id)
                if weight is None:
                    weight = weights[victim_id] = effective_weight(victim, config, now)
                if weight < priority:
                    found.append(victim)
                else:
                    passed_over.append(victim)
        return found, passed_over

    def _borrowed_jobs(self, job: JobView) -> list[JobView]:
        """The borrowers' candidates, written out as `_own_jobs`: a reclaim search looks at
        each running job of every other queue above its share (thousands in a backlog)."""
        cycle = self.cycle
        critical = job.spec.priority >= CRITICAL_PRIORITY
        config, now, weights = cycle.config, cycle.now, self._weights
        ceiling, cooldown = config.ceiling, config.cooldown
        evicted, claimed = cycle.evicted, cycle.claimed
        waited: set[str] = set()
        listed: frozenset[str] = frozenset()
        if not critical:
            escalated, listed = self._ceiling()
            waited = {victim for _, victim in escalated[: self.waits_for(job)]}
        found: list[JobView] = []
        taker = cycle.usage.get(job.spec.queue)
        for queue, by_priority in cycle.snapshot.job_index.victims.items():
            usage = cycle.usage.get(queue)
            if queue == job.spec.queue or usage is None or not usage.queue.reclaimable:
                continue
            if not usage.over_deserved(usage.kept):
                continue
            if taker is not None and not usage.lends_to(taker, critical):
                continue  # across departments: DESIGN §2 "Hierarchy"
            for value, jobs in by_priority.items():
                for victim in jobs.values():
                    victim_id = victim.id
                    if victim_id in evicted or victim_id in claimed:
                        continue  # signalled, or promised to another plan
                    if critical:
                        found.append(victim)
                        continue
                    last = victim.last_evicted_at
                    if last is not None and now - last < cooldown:
                        continue  # in its cooldown
                    if value < ceiling:
                        weight = weights.get(victim_id)
                        if weight is None:
                            weight = weights[victim_id] = effective_weight(victim, config, now)
                        if ceiling <= weight and (victim_id in waited or victim_id not in listed):
                            continue  # escalated to the ceiling, and ends before P's SLO
                    found.append(victim)
        return found

    def weight(self, victim: JobView) -> float:
        weights = self._weights
        weight = weights.get(victim.id)
        if weight is None:
            weight = weights[victim.id] = effective_weight(
                victim, self.cycle.config, self.cycle.now
            )
        return weight

    def _units(self, victim: JobView) -> list[Unit]:
        units_of = self._units_of
        units = units_of.get(victim.id)
        if units is None:
            units = units_of[victim.id] = victim_units(
                victim, self.cycle.config, self.cycle.now, self.weight(victim)
            )
        return units

    def floor_veto(self, own: str, job: JobView | None = None) -> FloorVeto:
        """Reclaim's floor (`FloorVeto`) for a preemptor of queue `own` (`job`, when its
        department's share decides what it may take across departments)."""
        return FloorVeto(self.cycle.usage, own, job)


class FloorVeto:
    """Reclaim's floor, as Volcano's proportion plugin: a queue may lose a unit while it is
    above its deserved share before that eviction (its last victim may take it below), never
    below its guarantee. Units of the preemptor's own queue pass. Across departments (DESIGN
    §2 "Hierarchy") the same floor holds for the victim's department, and a non-critical
    preemptor takes from another department only while its own department stays within its
    deserved share with the preemptor's gang."""

    def __init__(
        self, usage: Mapping[str, QueueUsage], own: str, job: JobView | None = None
    ) -> None:
        self.usage = usage
        self.own = own
        # Turned a unit away for what was taken from its queue before it: which units join
        # then depends on their order (`CycleContext.order_mattered`).
        self.order_mattered = False
        entry = usage.get(own)
        self.home: QueueUsage | None = None if entry is None else entry.top
        # May it take from other departments, and from its siblings? A team's preemptor takes
        # across only while its department stays within its share, and from its siblings only
        # while its own queue stays within its own (a critical one asks no share).
        self.across = True
        self.siblings = True
        if entry is not None and entry.parent is not None and job is not None:
            spec = job.spec
            if spec.priority < CRITICAL_PRIORITY:
                gang = spec.gang_request
                self.across = not entry.parent.over_deserved(entry.parent.tree_holds(gang))
                self.siblings = entry.within_deserved(gang)

    def __call__(self, unit: Unit, taken: Mapping[str, Resources]) -> bool:
        queue = unit.queue
        if queue == self.own:
            return True
        entry = self.usage[queue]
        before = entry.kept - taken.get(queue, Resources())
        if entry.may_lose(before, unit.resources) and self._department_lets(entry, unit, taken):
            return True
        if queue in taken or any(child.queue.name in taken for child in entry.top.children):
            self.order_mattered = True
        return False

    def _department_lets(
        self, entry: QueueUsage, unit: Unit, taken: Mapping[str, Resources]
    ) -> bool:
        department = entry.top
        if department is self.home:
            return self.siblings  # a sibling (or, in a flat list, any other queue)
        if not self.across:
            return False
        if department is entry:
            return True  # a top-level queue: its own floor is the department's
        return department.may_lose(_tree_before(department, taken), unit.resources)

    def closed(self, queue: str, taken: Mapping[str, Resources]) -> bool:
        """No longer above its deserved share with what is taken (nor, across departments,
        its department above the department's): more taken never puts it back above."""
        if queue == self.own:
            return False
        entry = self.usage[queue]
        if not entry.over_deserved(entry.kept - taken.get(queue, Resources())):
            return True
        department = entry.top
        if department is self.home or department is entry:
            return False
        return not self.across or not department.over_deserved(_tree_before(department, taken))


def _tree_before(department: QueueUsage, taken: Mapping[str, Resources]) -> Resources:
    """What a department keeps before a plan's next unit: its children's, less what the plan
    has taken from them."""
    before = department.tree_kept()
    for child in department.children:
        gone = taken.get(child.queue.name)
        if gone is not None:
            before = before - gone
    return before


def hopeless(cycle: CycleContext, job: JobView) -> bool:
    """Would every victim search for `job` among its queue's lower-priority work fail, even
    taking all of it? A cheap count on the job index that saves building the candidates of
    a search that cannot succeed (`victims.never_fits`); False when it cannot tell."""
    spec = job.spec
    index = cycle.snapshot.job_index
    return never_fits(cycle.room, spec, index.lower_devices(spec.queue, spec.priority))


def give_way(
    cycle: CycleContext,
    reason: EvictReason,
    planner: Planner,
    may_try: Callable[[JobView, GroupKey], bool] | None = None,
) -> None:
    """Work through the waiting groups in rank order; a group whose head finds no plan is
    settled for this phase (its jobs would search the same victims for the same shape), and
    so is a group the phase leaves to another (`may_try` false)."""
    heads: list[tuple[tuple[int, float, str], int, int]] = []
    waiting = cycle.waiting
    phase = reason.value
    seen = cycle.waiting_seen.get(phase, 0)
    cycle.waiting_seen[phase] = len(waiting)
    for number in range(seen, len(waiting)):  # the groups allocate left since the last call
        (_, jobs), first = waiting[number]
        spec = jobs[first].spec
        if spec.may_preempt:
            heads.append((spec.rank, number, first))
    if not heads:
        return
    # In rank order: the heads sorted once, and the group-mates taken up after a head
    # (rarely: it started, holds room or a nomination, or found a plan) in a heap beside
    # them; the next head is the smaller of the two fronts. Popping a heap of every head was
    # a third of give_way's own time in the 10k burst.
    heads.sort()
    later: list[tuple[tuple[int, float, str], int, int]] = []
    ahead = 0
    pools: VictimPools | None = None  # made at the first search: most heads back off
    started, blocked, usage, wakeups = cycle.started, cycle.blocked, cycle.usage, cycle.wakeups
    now, backoff = cycle.now, cycle.config.preempt_backoff
    count = len(heads)
    while ahead < count or later:
        if cycle.evicted_gpu > 0 and cycle.eviction_budget <= 0:
            break
        if cycle.until_decided and not cycle.undecided:
            break  # a quiet check that found a plan: the phases take over (core/shortcuts/quiet.py)
        if later and (ahead == count or later[0] < heads[ahead]):
            _, number, position = heapq.heappop(later)
        else:
            _, number, position = heads[ahead]
            ahead += 1
        group = waiting[number][0]
        (queue, priority, _shape), jobs = group
        job = jobs[position]
        if job.id in started or job.id in blocked or job.nomination is not None:
            if position + 1 < len(jobs):
                heapq.heappush(later, (jobs[position + 1].spec.rank, number, position + 1))
            continue
        if queue not in usage or (may_try is not None and not may_try(job, group[0])):
            continue  # the whole group asks the same of the same queue
        cycle.reached.setdefault(job.id, []).append(phase)
        ends = back_off_ends(job.preempt_failed_at, priority, now, backoff)
        if ends is not None:
            # The group's best job found no victims a moment ago; its group-mates would run
            # the same search. Back off until the timer, unless something else wakes us.
            wakeups.append(ends)
            continue
        if position + 1 < len(jobs):
            following: tuple[tuple[int, float, str], int, int] | None = (
                jobs[position + 1].spec.rank,
                number,
                position + 1,
            )
        else:
            following = None
        reserved = cycle.unreserve(job.id)  # its own reserved room counts as free for it
        if reserved and _start_on_free_room(cycle, job):
            continue
        key = (phase, group[0])
        if cycle.known_failure(key, job):
            plan = None  # failed before, and nothing since could change the answer (memo.py)
        else:
            if pools is None:
                pools = VictimPools(cycle)
            cycle.order_mattered = False
            plan = planner(job, pools)
            if plan is None:
                if not cycle.order_mattered:  # else time alone may change the answer
                    cycle.record_failure(key, job)
            elif _wait_for_a_cheaper_plan(cycle, job, plan):
                # Not a failure: a victim's next checkpoint may make a lossless plan, with
                # nothing else changing, so this search is not settled (core/shortcuts/memo.py).
                plan = None
        if reserved:  # what its plan does not use stays out of others' reach this cycle
            cycle.reserve(job.id, reserved)
        if plan is None:
            cycle.missed.add(job.id)
            if priority >= CRITICAL_PRIORITY:  # look again soon, even if nothing happens
                cycle.wakeups.append(cycle.now + cycle.config.preempt_backoff)
            continue
        _execute(cycle, job, plan)
        if following is not None:
            heapq.heappush(later, following)


def _start_on_free_room(cycle: CycleContext, job: JobView) -> bool:
    """A starving job whose reservation was released may fit now (room freed since allocate,
    e.g. another reservation's): it starts instead of taking victims."""
    placement = fits_on_free_room(cycle, job)
    if placement is None:
        return False
    cycle.start(job, placement)
    return True


def fits_on_free_room(cycle: CycleContext, job: JobView) -> tuple[TaskPlacement, ...] | None:
    """Where `job`'s gang, at its minimum, fits in the cycle's free room as it is, within its
    queue's capability; None if it does not."""
    spec = job.spec
    if not cycle.usage[spec.queue].within_capability(spec.gang_request):
        return None
    if not cycle.may_return(job):
        return None
    return place_job(cycle.room, spec, maximum=spec.min_available)


def search(
    cycle: CycleContext,
    job: JobView,
    index: VictimIndex,
    allow: Veto | None = None,
    enough: Enough | None = None,
) -> Plan | None:
    """One victim search for `job` among `index`'s units on the cycle's working room."""
    if not index.units:
        return None
    settled, packed = packed_plan(cycle, job, index, allow, enough, patience(cycle, job))
    if settled:  # `pack_with_victims` (core/defrag.py)
        return packed
    units = len(index.units)
    known, plan, order_mattered = cycle.known_search(job, units)
    if not known:
        load = packing_load(cycle, job.spec)
        plan = find_plan(
            cycle.room, job.spec, index, cycle.evicted, allow, patience(cycle, job), enough, load
        )
        if plan is None and allow is not None and _retry_on_whole_nodes(cycle, job):
            clear = _on_clearable_nodes(cycle, index)
            if clear is not None:
                plan = find_plan(
                    cycle.room,
                    job.spec,
                    clear,
                    cycle.evicted,
                    allow,
                    patience(cycle, job),
                    enough,
                    load,
                )
        order_mattered = plan is None and allow is not None and allow.order_mattered
        cycle.log_search(job, units, plan, order_mattered)
    if order_mattered:
        cycle.order_mattered = True
    return plan


def _by_victim(plan: Plan) -> list[tuple[JobView, tuple[int, ...]]]:
    """The plan's units as one eviction per job: its tasks, () for the whole gang."""
    tasks: dict[str, tuple[JobView, set[int] | None]] = {}
    for unit in plan.units:
        victim, taken = tasks.get(unit.job.id, (unit.job, set()))
        if unit.whole or taken is None:
            tasks[unit.job.id] = (victim, None)
        else:
            tasks[unit.job.id] = (victim, taken | set(unit.tasks))
    return [
        (victim, () if taken is None else tuple(sorted(taken))) for victim, taken in tasks.values()
    ]


def _reason(holder: JobView, victim: JobView) -> EvictReason:
    """Inside the preemptor's queue: preempt; another queue's: reclaim."""
    return EvictReason.PREEMPT if victim.spec.queue == holder.spec.queue else EvictReason.RECLAIM


def _execute(cycle: CycleContext, job: JobView, plan: Plan) -> None:
    pending: list[PendingVictim] = []
    timed = signal_times(job, plan, cycle.config, cycle.now, cycle.snapshot.estimates)
    for victim, tasks in _by_victim(plan):
        gpu = victim.spec.gpu * (len(tasks) if tasks else len(victim.placement))
        at = timed.get(victim.id)
        if at is not None and at > cycle.now:  # a timed eviction: signalled later
            placements = tuple(victim.placement[i] for i in tasks)
            pending.append(PendingVictim(victim.id, placements, at))
            cycle.commit(victim, pending[-1])
        elif gpu <= cycle.eviction_budget or cycle.evicted_gpu == 0:
            cycle.evict(Evict(victim.id, _reason(job, victim), job.id, tasks, gpu), victim)
        else:
            placements = tuple(victim.placement[i] for i in tasks)
            pending.append(PendingVictim(victim.id, placements))
            cycle.commit(victim, pending[-1])
    victims = tuple(dict.fromkeys(unit.job.id for unit in plan.units))
    reclaims = any(unit.queue != job.spec.queue for unit in plan.units)
    reason = EvictReason.RECLAIM if reclaims else EvictReason.PREEMPT
    nomination = Nomination(plan.placement, victims, tuple(pending), cycle.now, reason.value)
    cycle.nominations.append(Nominate(job.id, nomination))
    cycle.claimed.update(victim.job for victim in pending)
    cycle.promise(job, 1)
    cycle.block(job.id, plan.placement)
    count_started(cycle, job.spec, plan.placement)
    if pending:
        cycle.wakeups.append(next_signal(pending, cycle.now))


def _no_longer_a_victim(cycle: CycleContext, holder: JobView, pending: PendingVictim) -> bool:
    victim = cycle.jobs.get(pending.job)
    if victim is None or victim.state is not JobState.RUNNING:
        return False
    if is_protected(victim) or victim.id in cycle.evicted:
        return True
    last = victim.last_evicted_at
    return (
        last is not None
        and cycle.now - last < cycle.config.cooldown
        and holder.spec.priority < CRITICAL_PRIORITY
    )


def _below_the_floor(
    cycle: CycleContext, holder: JobView, pending: tuple[PendingVictim, ...]
) -> bool:
    """Would signalling a pending victim of another queue now take that queue from at or
    below its deserved share, or below its guarantee (reclaim's floor, `FloorVeto`)? Its
    queue may have shrunk since the plan was made (jobs finished, other victims signalled).
    As when the plan was made, the plan's victims before it count as gone and those after it
    as still there; so do other plans' pending victims (`QueueUsage.kept`)."""
    own = holder.spec.queue
    for number, entry in enumerate(pending):
        committed = cycle.committed_by.get(entry.job)
        if committed is None or committed[0] == own:
            continue
        queue = committed[0]
        later = Resources()
        for after in pending[number:]:
            other = cycle.committed_by.get(after.job)
            if other is not None and other[0] == queue:
                later = later + other[1]
        usage = cycle.usage[queue]
        before = usage.kept + later
        if not usage.may_lose(before, committed[1]):
            return True
        department = usage.top
        home = cycle.usage[own].top if own in cycle.usage else None
        if department is usage or department is home:
            continue
        # Across departments the victim's department keeps the same floor (DESIGN §2).
        later_there = Resources()
        for after in pending[number:]:
            other = cycle.committed_by.get(after.job)
            if other is not None and cycle.usage[other[0]].top is department:
                later_there = later_there + other[1]
        if not department.may_lose(department.tree_kept() + later_there, committed[1]):
            return True
    return False


def _over_its_share(
    cycle: CycleContext, holder: JobView, pending: tuple[PendingVictim, ...]
) -> bool:
    """Would signalling a pending victim of another queue now reclaim for a queue above its
    deserved share? Reclaim asks a non-critical preemptor's queue to stay within its share,
    with the preemptor's gang and less the plan's own-queue victims, when the plan is made
    (DESIGN §4.1); work that started in that queue since — a critical job, which asks no
    share — can break it before the budget lets the last victims go."""
    if holder.spec.priority >= CRITICAL_PRIORITY:
        return False
    own = holder.spec.queue
    leaving = Resources()
    reclaims = False
    for entry in pending:
        committed = cycle.committed_by.get(entry.job)
        if committed is None:
            continue
        if committed[0] == own:
            leaving = leaving + committed[1]
        else:
            reclaims = True
    if not reclaims:
        return False
    usage = cycle.usage[own]  # the holder's gang is in `promised`
    if not usage.over_deserved(usage.holds(Resources()) - leaving):
        return False
    parent = usage.parent  # a team may take its department's lent room home (§2)
    return parent is None or parent.over_deserved(parent.tree_holds(Resources()) - leaving)


def continue_nominations(cycle: CycleContext) -> None:
    """Signal victims a nomination still waits for, as far as this cycle's budget allows —
    in its holder's pass: a non-critical plan's after the non-critical allocate, so that what
    that pass started in the holder's queue counts when its share is checked (B19). Each
    nomination goes on once a cycle."""
    continued: set[str] = cycle.memo("nominations continued", set)
    eligible = {key[0] for key, _ in cycle.eligible_groups}
    nominated = [
        job
        for job in cycle.snapshot.job_index.nominated.values()
        if job.spec.queue in eligible
        and job.id not in continued
        and cycle.in_pass(group_key(job.spec))
    ]
    continued.update(job.id for job in nominated)
    for job in sorted(nominated, key=job_order):
        nomination = job.nomination
        if nomination is None or not nomination.pending or job.id in cycle.started:
            continue
        if job.id not in cycle.blocked:
            continue  # the nomination was dropped this cycle
        still: list[PendingVictim] = []
        ended = False  # a pending victim ended by itself (core/timing.py: waited for)
        if (
            any(_no_longer_a_victim(cycle, job, pending) for pending in nomination.pending)
            or _below_the_floor(cycle, job, nomination.pending)
            or _over_its_share(cycle, job, nomination.pending)
        ):
            # The plan no longer holds (a victim gained protection or was evicted since, its
            # queue no longer lends what the plan takes, or the preemptor's own queue is no
            # longer within its share): give the promise up and plan afresh in a later cycle.
            cycle.promise(job, -1)
            cycle.nominations.append(Nominate(job.id, None))
            cycle.notes.append(f"{job.id}: a pending victim changed, re-planning")
            for pending in nomination.pending:
                cycle.uncommit(pending.job)
            continue
        for pending in nomination.pending:
            victim = cycle.jobs.get(pending.job)
            if victim is None or victim.state is not JobState.RUNNING:
                ended = True
                continue  # gone by itself: its room is free already
            if pending.at is not None and pending.at > cycle.now:
                still.append(pending)  # a timed eviction, not due yet
                continue
            if pending.tasks:
                wanted = set(pending.tasks)
                tasks = tuple(i for i, t in enumerate(victim.placement) if t in wanted)
                if not tasks:
                    continue  # those tasks are gone already
                if len(victim.placement) - len(tasks) < victim.spec.min_available:
                    continue  # never cut a gang below its minimum
            else:
                tasks = ()
            count = len(tasks) if tasks else len(victim.placement)
            gpu = victim.spec.gpu * count
            if gpu <= cycle.eviction_budget or cycle.evicted_gpu == 0:
                cycle.uncommit(victim.id)  # from committed to releasing: its queue keeps as much
                cycle.evict(Evict(victim.id, _reason(job, victim), job.id, tasks, gpu), victim)
            else:
                still.append(pending)
        for pending in nomination.pending:
            if pending not in still:
                cycle.uncommit(pending.job)  # signalled, gone by itself, or left out
        if tuple(still) != nomination.pending:
            updated = Nomination(
                nomination.placement,
                nomination.victims,
                tuple(still),
                nomination.since,
                nomination.reason,
            )
            cycle.nominations.append(Nominate(job.id, updated))
        if still:
            cycle.wakeups.append(next_signal(still, cycle.now))
        elif ended:
            # Allocate ran before this cycle knew the plan waits for nobody: the holder
            # starts in the next cycle, not at a moment its last victim no longer needs.
            cycle.wakeups.append(cycle.now + 1)


def _retry_on_whole_nodes(cycle: CycleContext, job: JobView) -> bool:
    """Does a failed reclaim search for `job` search again on clearable nodes
    (`PolicyConfig.reclaim_whole_nodes`)? Only for gangs of whole GPUs: a single task needs one
    node, and the search already tries each."""
    spec = job.spec
    return cycle.config.reclaim_whole_nodes and spec.min_available > 1 and spec.whole_gpus > 0


def _on_clearable_nodes(cycle: CycleContext, index: VictimIndex) -> VictimIndex | None:
    """The units of `index` on nodes its candidates could clear whole — every GPU there free
    or held by a candidate — or None when that leaves none out or nothing. Reclaim's floor lets
    a queue lose room only while it is above its deserved share; a search in victim order
    spends that allowance on cheap victims beside work that never leaves, and a gang of whole
    nodes then finds no plan although enough nodes hold nothing but borrowed work."""
    room = cycle.room
    held = index.devices(cycle.evicted)
    nodes = {
        node for node, count in held.items() if room.whole[node] + count >= room.nodes[node].gpus
    }
    units = [unit for unit in index.units if all(t.node in nodes for t in unit.placements)]
    if not units or len(units) == len(index.units):
        return None
    return VictimIndex(units, index.first)
