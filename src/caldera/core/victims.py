"""Victim selection (DESIGN §4.1): the cheapest victims that let a preemptor be placed.

Which running jobs a preemptor P may take is the phases' business (preempt: lower priority in
P's queue; reclaim: other queues' borrowed room, whatever the priority). Never a protected,
critical (>= 1000) or conformance-protected job. A victim gives up all its tasks, or — when it
runs more than `min_available` — tasks above that, each its own unit; never a gang below its
minimum.

Order of victims (`VictimKey`, ties broken by the next criterion):
  1. least work lost (GPU-seconds since the last checkpoint that would survive; 0 when the
     emergency checkpoint fits in the grace period);
  2. a gang's extra tasks before a whole gang (nothing lost, the job goes on);
  3. lowest effective weight;
  4. most recently started;
  5. job id, then the task (an elastic job's last started task first).

Search: for every candidate domain (each node for a single-task preemptor; each tier-N domain
for a topology-constrained gang, plus the whole cluster unless the constraint is hard), add
victims in order on a working copy until P can actually be placed there (and they free what
else P needs, e.g. its queue's capability), then drop every victim P can do without. The
cheapest plan over all domains wins (`PlanCost`): too late for a critical preemptor's start
SLO, work lost, victims of P's own queue, victims, for a P never evicted itself how far it
spreads such work over leaves (core/packing.py), the victims' own keys (the most valuable
first), GPUs evicted, domain order. If no domain yields a plan, nothing is evicted.

Everything here is a function of the room, the preemptor's spec and the candidate units: a
search can be memoised on them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from caldera.core.config import PolicyConfig
from caldera.core.decisions import release_timing
from caldera.core.packing import spread
from caldera.core.placement import can_host, place_job, whole_slots
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.core.weight import effective_weight
from caldera.model import GPU_MILLI, JobSpec, Resources, TopologyMode

__all__ = [
    "Plan",
    "PlanCost",
    "PlanFloor",
    "Unit",
    "VictimIndex",
    "VictimKey",
    "candidate_domains",
    "devices_held",
    "expected_loss",
    "find_plan",
    "is_protected",
    "never_fits",
    "victim_units",
]


class VictimKey(NamedTuple):
    """Victim order (DESIGN §4.1 step 3): the smallest key goes first."""

    lost: float  # 1. GPU-seconds its eviction would lose
    whole: int  # 2. 0: a task above min_available (the job goes on), 1: the whole gang
    weight: float  # 3. effective weight
    newest: float  # 4. minus its start time: the most recently started first
    job: str  # 5. determinism
    task: int  # 6. minus the task index: an elastic job's last started task first


class Veto(Protocol):
    """(unit, resources already chosen per queue) -> may this unit join the plan?"""

    # Set once it turned a unit away for what was taken from the unit's queue before it:
    # which units join then depends on their order, so a search that fails is not settled
    # by its failure (core/shortcuts/memo.py).
    order_mattered: bool

    def __call__(self, unit: Unit, taken: Mapping[str, Resources]) -> bool: ...

    def closed(self, queue: str, taken: Mapping[str, Resources]) -> bool:
        """May no unit of `queue` join any more, whatever its size? Once true it stays true
        while `taken` only grows (a search then skips that queue's units unasked)."""
        ...


Enough = Callable[[Sequence["Unit"]], bool]
"""(victims) -> do they free what the preemptor needs besides room? Monotone: more victims
never make it false."""


def is_protected(job: JobView) -> bool:
    """Never a victim (`JobSpec.never_a_victim`)."""
    return job.spec.never_a_victim


def expected_loss(
    job: JobView, config: PolicyConfig, now: float, tasks: int | None = None
) -> float:
    """GPU-seconds of work an eviction would lose now (0 if an emergency checkpoint fits)."""
    if release_timing(job.spec, config)[1]:
        return 0.0
    return _work_at_risk(job, now, len(job.placement) if tasks is None else tasks)


def _work_at_risk(job: JobView, now: float, tasks: int) -> float:
    """GPU-seconds of `tasks` tasks' work since the point a restart would resume from."""
    work = job.work_done(now)
    saved = job.spec.checkpoint.resume_point(work, job.saved_work)
    return job.spec.gpu * tasks / GPU_MILLI * (work - saved)


class Unit(NamedTuple):
    """What one victim gives up: all its tasks (`whole`) or those above `min_available`.

    A named tuple, not a dataclass: a 20,000-job backlog makes about a million of them
    (every candidate of every pool a cycle builds), and a tuple is made in a third of the
    time; what the searches read most (its tasks' placements, its queue) is worked out
    once, when it is made."""

    job: JobView
    tasks: tuple[int, ...]
    whole: bool
    weight: float
    lost: float
    key: VictimKey
    delay: float  # seconds from the signal until its room is free
    placements: tuple[TaskPlacement, ...]  # where its tasks run, in `tasks` order
    queue: str

    @property
    def gpu(self) -> int:
        return self.job.spec.gpu * len(self.tasks)

    @property
    def resources(self) -> Resources:
        """What its eviction gives back to its queue's quotas."""
        return self.job.spec.task_request.scaled(len(self.tasks))


def victim_units(
    job: JobView, config: PolicyConfig, now: float, weight: float | None = None
) -> list[Unit]:
    """The ways `job` can give way: each task above `min_available` on its own, the last
    started first (nothing lost, the job goes on), then the whole gang.
    `weight`: its effective weight now, when the caller already has it."""
    if weight is None:
        weight = effective_weight(job, config, now)
    since = job.running_since
    newest = -(since if since is not None else 0.0)
    running = len(job.placement)
    spec = job.spec
    delay, saves = release_timing(spec, config)
    lost = 0.0 if saves else _work_at_risk(job, now, running)
    placement, queue, name = job.placement, spec.queue, job.id
    # tuple.__new__ straight: a named tuple's own constructor is a Python-level call, and
    # a backlog's pools make about a million units (two tuples each) per 10,000 jobs.
    units = (
        [
            _new(
                Unit,
                (
                    job,
                    (task,),
                    False,
                    weight,
                    0.0,
                    _new(VictimKey, (0.0, 0, weight, newest, name, -task)),
                    delay,
                    (placement[task],),
                    queue,
                ),
            )
            for task in range(running - 1, spec.min_available - 1, -1)
        ]
        if running > spec.min_available
        else []
    )
    key = _new(VictimKey, (lost, 1, weight, newest, name, 0))
    units.append(
        _new(Unit, (job, tuple(range(running)), True, weight, lost, key, delay, placement, queue))
    )
    return units


_new = tuple.__new__


class PlanCost(NamedTuple):
    """Plan order (DESIGN §4.1 step 7): the smallest cost wins."""

    late: int  # 1. a critical preemptor: some victim releases after its start SLO
    lost: float  # 2. GPU-seconds lost
    own: int  # 3. victims of the preemptor's own queue (borrowers first)
    victims: int  # 4. victims (jobs)
    spread: tuple[int, int]  # 5. a never-evicted preemptor: leaves it opens (core/packing.py)
    keys: tuple[VictimKey, ...]  # 6. the victims' own keys, the most valuable first
    gpus: int  # 7. milli-GPUs evicted
    order: int  # 8. domain order


@dataclass(frozen=True, slots=True)
class Plan:
    """A feasible victim set and where the preemptor will run once they are gone."""

    units: tuple[Unit, ...]
    placement: tuple[TaskPlacement, ...]
    cost: PlanCost


def _unit_key(unit: Unit) -> VictimKey:
    return unit.key


class VictimIndex:
    """The eligible victim units of one preemptor group, by node, cheapest first.

    Built once per cycle and group; units of jobs evicted meanwhile are skipped on reading.
    """

    def __init__(self, units: Sequence[Unit], first: Callable[[Unit], int] | None = None) -> None:
        """`first(unit)`: an optional criterion before the victim key (e.g. borrowers first)."""
        self.first = first
        # Without `first` the order is the victim key's alone (each unit's is unique).
        self._sort_key = self._order if first is not None else _unit_key
        self.units = sorted(units, key=self._sort_key)
        self.queues = frozenset(unit.queue for unit in self.units)
        self.by_node: dict[int, list[Unit]] = {}
        by_node = self.by_node
        for unit in self.units:
            placements = unit.placements
            if len(placements) == 1:  # most victims: one task, one node
                node = placements[0].node
                found = by_node.get(node)
                if found is None:
                    by_node[node] = [unit]
                else:
                    found.append(unit)
                continue
            for node in dict.fromkeys(t.node for t in placements):
                by_node.setdefault(node, []).append(unit)

    def _order(self, unit: Unit) -> tuple[int, VictimKey]:
        return (0 if self.first is None else self.first(unit), unit.key)

    def devices(self, gone: set[str]) -> dict[int, int]:
        """Node -> GPU devices the live candidates use there (each task once)."""
        return devices_held((unit.job for unit in self.units if unit.whole), gone)

    def cheapest(self, nodes: Sequence[int], gone: set[str]) -> VictimKey | None:
        """The smallest key of a live unit touching `nodes` (an index without `first`)."""
        found: VictimKey | None = None
        by_node = self.by_node
        for node in nodes:
            for unit in by_node.get(node, ()):
                if unit.job.id not in gone:
                    if found is None or unit.key < found:
                        found = unit.key
                    break
        return found

    def on(self, nodes: Sequence[int] | None, gone: set[str]) -> list[Unit]:
        """Live units touching `nodes` (None: all), cheapest first, each once."""
        if nodes is None:
            return [u for u in self.units if u.job.id not in gone]
        if len(nodes) == 1:
            return [u for u in self.by_node.get(nodes[0], ()) if u.job.id not in gone]
        seen: dict[int, Unit] = {}
        for node in nodes:
            for unit in self.by_node.get(node, ()):
                if unit.job.id not in gone:
                    seen[id(unit)] = unit
        return sorted(seen.values(), key=self._sort_key)


def devices_held(jobs: Iterable[JobView], gone: set[str]) -> dict[int, int]:
    """Node -> GPU devices the jobs not `gone` use there: what evicting them all could free
    at most, for `never_fits`."""
    found: dict[int, int] = {}
    for job in jobs:
        if job.id not in gone:
            for task in job.placement:
                if task.milli:
                    found[task.node] = found.get(task.node, 0) + len(task.devices)
    return found


def candidate_domains(
    room: Room, spec: JobSpec, index: VictimIndex | None = None
) -> list[Sequence[int] | None]:
    """Node sets to try; None stands for the whole cluster (binpack order).

    A single task needs one node: only nodes holding victims are worth trying. A gang with a
    hard topology constraint needs one tier-N domain. Any other gang tries tier-1 and tier-2
    domains (compact, cheap to search) and the whole cluster only as a last resort.
    """
    if spec.tasks == 1:
        nodes = room.nodes
        candidates = index.by_node if index is not None else range(len(nodes))
        return [(i,) for i in sorted(candidates) if can_host(nodes[i], spec)]
    topology = spec.topology
    tiers = (1, 2) if topology is None else (topology.highest_tier,)
    found: list[Sequence[int] | None] = []
    for tier in tiers:
        domains = room.tier1_nodes if tier <= 1 else room.tier2_nodes
        found.extend(
            tuple(nodes)
            for _, nodes in sorted(domains.items())
            if index is None or any(n in index.by_node for n in nodes)
        )
    if topology is None or topology.mode is TopologyMode.SOFT:
        found.append(None)
    return found


def _free_on(room: Room, spec: JobSpec, nodes: Sequence[int] | None) -> int:
    models = spec.gpu_models
    if spec.gpu_profile is not None:  # MIG: free slices of the profile, by GPU-equivalent
        return room.free_slices(spec.gpu_profile, nodes, models) * spec.gpu
    if nodes is None:
        return room.free_whole(models) * GPU_MILLI
    free = 0
    for index in nodes:
        if models is None or room.nodes[index].gpu_model in models:
            free += sum(room.free[index]) if spec.gpu < GPU_MILLI else room.whole[index] * GPU_MILLI
    return free


def _counted_prefix(
    room: Room, spec: JobSpec, nodes: Sequence[int] | None, units: Sequence[Unit]
) -> int | None:
    """A necessary condition that leaves the room alone: the shortest prefix of `units` after
    whose eviction, counting per node the whole GPUs that would be free, `min_available`
    tasks could fit (None: not even all of them). NVLink islands, CPU and memory are
    ignored, so the count is optimistic: it is a lower bound on the victims any plan in this
    domain needs, and None settles the domain."""
    need = spec.whole_gpus
    models = spec.gpu_models
    allowed = None if nodes is None else set(nodes)
    nodes_of = room.nodes
    if need == 0:  # a GPU share: count milli-GPUs
        target = spec.gpu * spec.min_available
        have = _free_on(room, spec, nodes)
        if have >= target:
            return 0
        for length, unit in enumerate(units, start=1):
            for task in unit.placements:
                if (allowed is None or task.node in allowed) and (
                    models is None or nodes_of[task.node].gpu_model in models
                ):
                    have += task.gpu
            if have >= target:
                return length
        return None
    tasks = 0
    target = spec.min_available
    if nodes is None:
        for model in room.models if models is None else models:
            for level, bucket in enumerate(room.buckets.get(model, ())):
                tasks += len(bucket) * (level // need)
    else:
        for index in nodes:
            if models is None or nodes_of[index].gpu_model in models:
                tasks += room.whole[index] // need
    if tasks >= target:
        return 0
    freed: dict[tuple[int, int], int] = {}
    gained: dict[int, int] = {}
    # A task counts once: only a job running above its minimum has more than one unit
    # (its extra tasks, then its whole gang), so only such a job's tasks are remembered.
    counted: set[tuple[str, int]] = set()
    free = room.free
    whole = room.whole
    for length, unit in enumerate(units, start=1):
        job = unit.job
        placement = job.placement
        several = len(placement) > job.spec.min_available
        for i in unit.tasks:
            task = placement[i]
            node = task.node
            if allowed is not None and node not in allowed:
                continue
            if several:
                if (job.id, i) in counted:
                    continue
                counted.add((job.id, i))
            if models is not None and nodes_of[node].gpu_model not in models:
                continue
            node_free = free[node]
            milli = task.milli
            for device in task.devices:
                held = freed.get((node, device), 0)
                before = node_free[device] + held
                if before < GPU_MILLI <= before + milli:
                    extra = gained.get(node, 0)
                    base = whole[node]
                    tasks += (base + extra + 1) // need - (base + extra) // need
                    gained[node] = extra + 1
                freed[(node, device)] = held + milli
        if tasks >= target:
            return length
    return None


def never_fits(room: Room, spec: JobSpec, devices: Mapping[int, int]) -> bool:
    """Could the gang not be placed even with every task of some holders gone (`devices`:
    node -> the GPU devices their tasks use there)? Counts per node the whole GPUs that could
    then be free — optimistic: NVLink islands, topology, CPU and memory are ignored — so True
    proves that every victim search among those holders fails, without building its
    candidates. Whole-GPU tasks only (False: not known)."""
    per_task = spec.whole_gpus
    if per_task == 0 or spec.gpu % GPU_MILLI:
        return False
    models = spec.gpu_models
    need = spec.min_available
    tasks = whole_slots(room, per_task, models, need)
    if tasks >= need:
        return False
    whole, nodes = room.whole, room.nodes
    for node, count in devices.items():
        info = nodes[node]
        if models is not None and info.gpu_model not in models:
            continue
        free = whole[node]
        tasks += min(info.gpus, free + count) // per_task - free // per_task
        if tasks >= need:
            return _never_in_one_domain(room, spec, devices)
    return True


def _never_in_one_domain(room: Room, spec: JobSpec, devices: Mapping[int, int]) -> bool:
    """`never_fits` for a gang that must run inside one domain of its tier (`hard`
    topology): the same count, domain by domain."""
    topology = spec.topology
    if topology is None or topology.mode is not TopologyMode.HARD or spec.min_available < 2:
        return False
    per_task, need = spec.whole_gpus, spec.min_available
    whole, nodes = room.whole, room.nodes
    for usable, _ in room.domain_layout(topology.highest_tier, spec.gpu_models).values():
        tasks = 0
        for node in usable:
            tasks += min(nodes[node].gpus, whole[node] + devices.get(node, 0)) // per_task
        if tasks >= need:
            return False
    return True


def _fits(
    room: Room, spec: JobSpec, nodes: Sequence[int] | None
) -> tuple[TaskPlacement, ...] | None:
    """Could the gang be placed now? Room unchanged afterwards."""
    mark = room.mark()
    placement = place_job(room, spec, maximum=spec.min_available, within=nodes)
    room.rollback(mark)
    return placement


def find_plan(
    room: Room,
    spec: JobSpec,
    index: VictimIndex,
    gone: set[str] | None = None,
    allow: Veto | None = None,
    patience: float | None = None,
    enough: Enough | None = None,
    load: Mapping[int, int] | None = None,
) -> Plan | None:
    """The cheapest feasible victim set over all candidate domains, or None.

    `index` holds the eligible victims; `gone` names jobs already evicted this cycle;
    `allow(unit, taken)` may veto a unit given the resources already chosen per queue
    (reclaim keeps victim queues above their floors with it). `patience`: seconds the preemptor
    can still wait for room and start within its SLO — plans whose victims all release in
    time come first. `enough(units)`: do these victims free the quota the preemptor needs
    besides room (its own queue's capability)? Adding victims never makes it false.
    `load`: non-evictable milli-GPUs per leaf, for a preemptor that will never be evicted
    itself: plans that spread such work over fewer leaves come first (core/packing.py).
    Domains are tried cheapest-victim first and the search stops once no untried domain could
    beat the best plan.
    """
    gone = gone if gone is not None else set()
    if spec.tasks > 1 and never_fits(room, spec, index.devices(gone)):
        return None  # not even with every candidate gone: no domain needs trying
    if (
        allow is not None
        and all(allow.closed(queue, {}) for queue in index.queues)
        and _counted_prefix(room, spec, None, ()) is None
    ):
        # The veto lets no candidate join (their queues lost what they borrowed since the
        # pool was made, by evictions earlier in this cycle), and the gang does not fit
        # anywhere without victims: every domain's plan would fail.
        return None
    domains = candidate_domains(room, spec, index)
    if enough is not None and None not in domains:
        # Victims for quota need not make room: the preemptor may fit anywhere (placement
        # honours its topology), while its queue's victims run elsewhere.
        domains.append(None)
    only_own = index.queues == {spec.queue}
    best: Plan | None = None

    def settled(lost: float, lowest: VictimKey, nodes: Sequence[int]) -> int:
        """Against the best plan so far, a domain whose bound is at least (lost, lowest):
        _GO on, _SKIP it (its floor is above that plan), or _STOP (no plan there or in any
        later domain can beat it)."""
        if best is None:
            return _GO
        if _cannot_beat(best.cost, lost, lowest, load is not None):
            return _STOP
        floor = PlanFloor(0, lost, int(only_own), 1, _spread_floor(room, nodes, load))
        return _SKIP if floor.above(best.cost) else _GO

    # Bounded domains first, in the order of their bounds (the lost work and key of the unit
    # at the counting bound's position, then domain order); the cluster-wide search (None)
    # only if none of them works.
    for lost, lowest, order, nodes, local in _bounded_in_order(
        room, spec, index, domains, gone, settled
    ):
        verdict = settled(lost, lowest, nodes)
        if verdict == _STOP:
            break
        if verdict == _SKIP:
            continue  # every plan in this domain costs more than the best one found
        plan = _plan_in_domain(room, spec, nodes, local, allow, order, patience, enough, load)
        if plan is not None and (best is None or plan.cost < best.cost):
            best = plan
    if best is None and None in domains:
        bound = _bound(room, spec, index, None, gone)
        if bound is not None:
            order = domains.index(None)
            best = _plan_in_domain(room, spec, None, bound[1], allow, order, patience, enough, load)
    return best


_Bounded = tuple[float, VictimKey, int, Sequence[int], list[Unit]]
"""A bounded domain to try: its bound's lost work and key, its order, nodes and candidates."""

_GO, _SKIP, _STOP = range(3)
Settled = Callable[[float, VictimKey, Sequence[int]], int]
"""(a lower bound on a domain's bound: lost work, key; its nodes) -> _GO, _SKIP or _STOP,
as the search would answer the domain at that bound. Both answers that spare the bound are
monotone — a larger bound, or a better plan found later, keeps them — so a domain answered
_SKIP at its lower bound is skipped at its bound too, and _STOP at the cheapest lower bound
left means every domain left would stop the search."""


def _bound(
    room: Room, spec: JobSpec, index: VictimIndex, nodes: Sequence[int] | None, gone: set[str]
) -> tuple[VictimKey, list[Unit]] | None:
    """A domain's bound and its live candidates, cheapest first; None when it has none, or
    not even all of them make room. Every plan there keeps the last victim of its shortest
    feasible prefix, which lies at or after the counting bound's position: that unit's key
    bounds the plan's lost work and its most valuable victim from below."""
    local = index.on(nodes, gone)
    if not local:
        return None
    shortest = _counted_prefix(room, spec, nodes, local)
    if shortest is None:
        return None
    tail = local[max(shortest, 1) - 1 :]
    return (tail[0].key if index.first is None else min(unit.key for unit in tail)), local


def _bounded_in_order(
    room: Room,
    spec: JobSpec,
    index: VictimIndex,
    domains: Sequence[Sequence[int] | None],
    gone: set[str],
    settled: Settled,
) -> Iterator[_Bounded]:
    """The bounded domains with a bound, in the order of (bound's lost work, its key, domain
    order) — worked out lazily: a domain's bound is at least the key of its cheapest live
    candidate, so a domain is bounded only when that key comes up, and a search that stops
    early (`_cannot_beat`) never bounds the rest. An index that orders some units first
    (`VictimIndex.first`) has no such cheap lower bound: every domain is bounded at once.
    `settled` answers a domain at its lower bound before it is bounded (`Settled`)."""
    heap: list[tuple[float, VictimKey, int, bool, Sequence[int], list[Unit] | None]] = []
    for order, nodes in enumerate(domains):
        if nodes is None:
            continue
        if index.first is None:
            cheapest = index.cheapest(nodes, gone)
            if cheapest is not None:
                heap.append((cheapest.lost, cheapest, order, False, nodes, None))
            continue
        bound = _bound(room, spec, index, nodes, gone)
        if bound is not None:
            heap.append((bound[0].lost, bound[0], order, True, nodes, bound[1]))
    # (lost, key, order) is unique per domain: the rest of an entry is never compared.
    heapq.heapify(heap)
    while heap:
        lost, key, order, exact, nodes, local = heapq.heappop(heap)
        if exact:
            assert local is not None
            yield lost, key, order, nodes, local
            continue
        verdict = settled(lost, key, nodes)
        if verdict == _STOP:
            return
        if verdict == _SKIP:
            continue
        bound = _bound(room, spec, index, nodes, gone)
        if bound is not None:
            heapq.heappush(heap, (bound[0].lost, bound[0], order, True, nodes, bound[1]))


class PlanFloor(NamedTuple):
    """What every plan in one domain costs at least, criterion by criterion (PlanCost's
    first five): no victim releases late (0), the lost work its counting bound proves, one
    victim of the preemptor's queue when every candidate is of that queue (else 0), one
    victim, and how little its placement could spread non-evictable work. A plan's cost is
    at least its floor in each criterion, so a floor above the best cost found (as tuples)
    proves that no plan in the domain beats it."""

    late: int
    lost: float
    own: int
    victims: int
    spread: tuple[float, float]

    def above(self, cost: PlanCost) -> bool:
        """Is this floor above `cost` in PlanCost's order (its first five criteria)?"""
        mine = (self.late, self.lost, self.own, self.victims, self.spread)
        return mine > (cost.late, cost.lost, cost.own, cost.victims, cost.spread)


def _spread_floor(
    room: Room, nodes: Sequence[int] | None, load: Mapping[int, int] | None
) -> tuple[float, float]:
    """The least `PlanCost.spread` a placement inside `nodes` can have: exact when the
    domain lies in one leaf (a node, a tier-1 domain), no bound otherwise."""
    if load is None:
        return (0, 0)  # spread is not a criterion for this preemptor: every plan has (0, 0)
    if nodes is None:
        return (0, -math.inf)
    leaves = {room.nodes[node].tier1 for node in nodes}
    if len(leaves) != 1:
        return (0, -math.inf)
    held = load.get(next(iter(leaves)), 0)
    return (1 if held == 0 else 0, -held)


def _cannot_beat(best: PlanCost, lost: float, lowest: VictimKey, packing: bool) -> bool:
    """Could no plan whose lost work is at least `lost` and whose most valuable victim's key
    is at least `lowest` cost less than `best`? (`packing`: plans also differ in spread.)"""
    if best.late:
        return False
    if lost != best.lost:
        return lost > best.lost
    if packing:
        return False
    # Equal loss at best: only a single victim outside the preemptor's queue beats nothing
    # but a smaller key.
    return best.own == 0 and best.victims == 1 and lowest > best.keys[0]


def _give_units(
    room: Room, units: Sequence[Unit], given: set[tuple[str, int]] | None = None
) -> None:
    given = set() if given is None else given
    for unit in units:
        for i in unit.tasks:
            if (unit.job.id, i) not in given:
                given.add((unit.job.id, i))
                room.give(unit.job.placement[i])


def _shortest_prefix(
    room: Room,
    spec: JobSpec,
    nodes: Sequence[int] | None,
    units: list[Unit],
    mark: int,
    at_least: int,
    enough: Enough | None = None,
) -> tuple[int, tuple[TaskPlacement, ...]] | None:
    """The length of the shortest prefix of `units` whose eviction lets the gang fit, and the
    placement it gets. A longer prefix frees a superset of the room, so: gallop up from the
    counting bound (doubling, giving back only the new victims), then binary-search down.
    Most plans need a few victims out of hundreds of candidates; few are ever given back."""
    need = spec.gpu * spec.min_available

    def fits_now(length: int) -> tuple[TaskPlacement, ...] | None:
        if _free_on(room, spec, nodes) < need:
            return None
        if enough is not None and not enough(units[:length]):
            return None
        return _fits(room, spec, nodes)

    def attempt(length: int) -> tuple[TaskPlacement, ...] | None:
        room.rollback(mark)
        _give_units(room, units[:length])
        return fits_now(length)

    room.rollback(mark)
    given: set[tuple[str, int]] = set()
    done = 0
    length = min(max(at_least, 1), len(units))
    while True:
        _give_units(room, units[done:length], given)
        done = length
        best = fits_now(length)
        if best is not None:
            break
        if length == len(units):
            return None
        length = min(len(units), length * 2)
    low, high = max(at_least, 1, length // 2 + 1), length
    while low < high:
        middle = (low + high) // 2
        placement = attempt(middle)
        if placement is None:
            low = middle + 1
        else:
            high, best = middle, placement
    return high, best


def _prune(
    room: Room,
    spec: JobSpec,
    nodes: Sequence[int] | None,
    chosen: list[Unit],
    placement: tuple[TaskPlacement, ...],
    mark: int,
    enough: Enough | None,
) -> tuple[list[Unit], tuple[TaskPlacement, ...]]:
    """Drop each victim the preemptor can do without — its own queue's first, then the
    others', each most expensive first. The room holds every chosen victim's tasks as given
    back; trying to drop one takes back only the tasks no other chosen unit frees, and gives
    them again if the preemptor no longer fits — one victim's worth of room changes a trial,
    not the whole set's.

    A victim none of whose tasks taken back lies on a node of the current placement can
    always go: that placement still stands (whatever the victim's room held is elsewhere), so
    the preemptor fits; only the placement it would get now is not worked out. A later trial
    that takes room on a node of that placement is tried in full; and the placement is worked
    out at the end, on the room the last victim that went left (a failed trial gives its room
    back) — where trying every victim in full would have worked it out last."""
    room.rollback(mark)
    covering: dict[tuple[str, int], int] = {}
    for unit in chosen:
        for i in unit.tasks:
            covering[(unit.job.id, i)] = covering.get((unit.job.id, i), 0) + 1
    _give_units(room, chosen)
    own = spec.queue
    used = {task.node for task in placement}
    stale = False  # victims went since `placement` was worked out
    for unit in sorted(chosen, key=lambda u: (u.queue == own, u.key), reverse=True):
        trial = [c for c in chosen if c is not unit]
        if not trial:
            continue
        alone = [unit.job.placement[i] for i in unit.tasks if covering[(unit.job.id, i)] == 1]
        for task in alone:
            room.take(task)
        if all(task.node not in used for task in alone) and (enough is None or enough(trial)):
            chosen, stale = trial, True  # the placement still stands
        else:
            smaller = None
            # The counting bound on the room as it now is (no further victims): None settles it.
            if _counted_prefix(room, spec, nodes, ()) is not None and (
                enough is None or enough(trial)
            ):
                smaller = _fits(room, spec, nodes)
            if smaller is None:
                for task in alone:
                    room.give(task)
                continue
            chosen, placement, stale = trial, smaller, False
            used = {task.node for task in placement}
        for i in unit.tasks:
            covering[(unit.job.id, i)] -= 1
    if stale:
        placed = _fits(room, spec, nodes)
        assert placed is not None  # the last placement worked out still stands
        placement = placed
    return chosen, placement


def _plan_in_domain(
    room: Room,
    spec: JobSpec,
    nodes: Sequence[int] | None,
    ordered: Sequence[Unit],
    allow: Veto | None,
    order: int,
    patience: float | None,
    enough: Enough | None = None,
    load: Mapping[int, int] | None = None,
) -> Plan | None:
    mark = room.mark()
    try:
        # The cheapest prefix of the ordered candidates that lets the preemptor fit.
        chosen: list[Unit] = []
        whole_jobs: set[str] = set()
        counted: dict[str, int] = {}  # tasks of each job already chosen (its extras)
        taken: dict[str, Resources] = {}
        closed: set[str] = set()  # queues the veto lets no more units of
        present: set[str] | None = None  # the queues of the candidates
        for unit in ordered:
            if unit.job.id in whole_jobs:
                continue
            if allow is not None:
                queue = unit.queue
                if queue in closed:
                    continue
                if not allow(unit, taken):
                    if allow.closed(queue, taken):
                        closed.add(queue)
                        if present is None:
                            present = {u.queue for u in ordered}
                        if present <= closed:
                            break  # nothing after this may join either
                    continue
            chosen.append(unit)
            # A whole gang after some of its extras gives back only the rest.
            tasks = len(unit.tasks) - (counted.get(unit.job.id, 0) if unit.whole else 0)
            counted[unit.job.id] = counted.get(unit.job.id, 0) + tasks
            if allow is not None:  # what each queue gave so far: only the veto reads it
                given = unit.job.spec.task_request.scaled(tasks)
                before = taken.get(unit.queue)
                taken[unit.queue] = given if before is None else before + given
            if unit.whole:
                whole_jobs.add(unit.job.id)
        at_least = _counted_prefix(room, spec, nodes, chosen)
        if at_least is None:
            return None
        found = _shortest_prefix(room, spec, nodes, chosen, mark, at_least, enough)
        if found is None:
            return None
        length, placement = found
        chosen, placement = _prune(room, spec, nodes, chosen[:length], placement, mark, enough)
        # A whole-gang unit supersedes the same job's extra-tasks unit.
        wholes = {c.job.id for c in chosen if c.whole}
        chosen = [c for c in chosen if c.whole or c.job.id not in wholes]
        late = patience is not None and max(c.delay for c in chosen) > patience
        jobs = {c.job.id: c.job for c in chosen}
        cost = PlanCost(
            late=int(late),
            lost=sum(c.lost for c in chosen),
            own=sum(1 for job in jobs.values() if job.spec.queue == spec.queue),
            victims=len(jobs),
            spread=(0, 0) if load is None else spread(room, placement, load),
            keys=tuple(sorted((c.key for c in chosen), reverse=True)),
            gpus=sum(c.gpu for c in chosen),
            order=order,
        )
        return Plan(tuple(sorted(chosen, key=lambda u: u.key)), placement, cost)
    finally:
        room.rollback(mark)
