"""The candidate victims of phases 3 (preempt) and 4 (reclaim), per preemptor group
(DESIGN §4.1 step 1): `VictimPools` builds, once per phase and (queue, priority) group, the
preemptor's own queue's lower-priority work (preempt) and the room other queues borrowed
(reclaim), each as a `VictimIndex` cheapest first; and what victims free for a queue's
quotas (`freed_by`, `frees`, `over_capability`), which a plan must make good.

The pools depend on the cycle's queue usage (`CycleContext.usage_memo`); the running jobs'
effective weights and victim units they are built from are functions of the snapshot alone
(`SNAPSHOT_MEMOS`), which a quiet check hands to the phases (core/shortcuts/quiet.py, 5).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from caldera.core.context import CycleContext
from caldera.core.domains import never_fits
from caldera.core.estimates import expected_end, slo_deadline
from caldera.core.floor import FloorVeto
from caldera.core.snapshot import JobView
from caldera.core.usage import QueueUsage
from caldera.core.victims import (
    Enough,
    Unit,
    VictimIndex,
    devices_held,
    victim_units,
)
from caldera.core.weight import effective_weight
from caldera.model import CRITICAL_PRIORITY, Resources

__all__ = [
    "SNAPSHOT_MEMOS",
    "VictimPools",
    "VictimsByQueue",
    "freed_by",
    "frees",
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
        """Would every search among `own(job)` fail, even taking all of it? `domains.never_fits`
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
            return index.devices(self.cycle.decided.evicted)
        chosen, passed_over = self._chosen_for(kind, job)
        if kind == "own":
            return self._own_devices(job, passed_over)
        return devices_held(chosen, self.cycle.decided.evicted)

    def _own_devices(self, job: JobView, passed_over: list[JobView]) -> dict[int, int]:
        """`devices` of the own pool, from the job index's count of every lower-priority job
        of the queue (kept across cycles) less the few not chosen or evicted since: a
        large preemptor's queue holds ~1,600 candidates and passes over a handful."""
        spec, cycle = job.spec, self.cycle
        index = cycle.snapshot.job_index
        gone = {victim.id: victim for victim in passed_over}
        by_priority = index.victims.get(spec.queue, {})
        for victim_id in cycle.decided.evicted:  # chosen, then evicted: no longer a candidate
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
        evicted, claimed, weights = cycle.decided.evicted, cycle.claimed, self._weights
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
        evicted, claimed = cycle.decided.evicted, cycle.claimed
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
