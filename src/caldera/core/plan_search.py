"""The search for the cheapest victim plan (DESIGN §4.1 step 2), `find_plan`.

For every candidate domain (core/domains.py: each node for a single-task preemptor; each
tier-N domain for a topology-constrained gang, plus the whole cluster unless the constraint
is hard), add victims in order (`VictimKey`, core/victims.py) on a working copy until P can
actually be placed there (and they free what else P needs, e.g. its queue's capability),
then drop every victim P can do without. The cheapest plan over all domains wins
(`PlanCost`): too late for a critical preemptor's start SLO, work lost, victims of P's own
queue, victims, for a P never evicted itself how far it spreads such work over leaves
(core/packing.py), the victims' own keys (the most valuable first), GPUs evicted, domain
order. If no domain yields a plan, nothing is evicted.

Everything here is a function of the room, the preemptor's spec and the candidate units: a
search can be memoised on them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

from caldera.core.domains import candidate_domains, counted_prefix, free_on, never_fits
from caldera.core.packing import spread
from caldera.core.placement import place_job
from caldera.core.room import Room, TaskPlacement
from caldera.core.victims import Enough, Plan, PlanCost, Unit, Veto, VictimIndex, VictimKey
from caldera.model import JobSpec, Resources

__all__ = ["PlanFloor", "find_plan"]


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
        and counted_prefix(room, spec, None, ()) is None
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
    shortest = counted_prefix(room, spec, nodes, local)
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
        if free_on(room, spec, nodes) < need:
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
            if counted_prefix(room, spec, nodes, ()) is not None and (
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
        at_least = counted_prefix(room, spec, nodes, chosen)
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
