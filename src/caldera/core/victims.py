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

Who may be a victim and in what order is all this module says; where a plan could go is
core/domains.py, and the search for the cheapest plan over those units core/plan_search.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from caldera.core.config import PolicyConfig
from caldera.core.decisions import release_timing
from caldera.core.room import TaskPlacement
from caldera.core.snapshot import JobView
from caldera.core.weight import effective_weight
from caldera.model import GPU_MILLI, Resources

__all__ = [
    "Plan",
    "PlanCost",
    "Unit",
    "VictimIndex",
    "VictimKey",
    "devices_held",
    "expected_loss",
    "is_protected",
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
    at most, for `never_fits` (core/domains.py)."""
    found: dict[int, int] = {}
    for job in jobs:
        if job.id not in gone:
            for task in job.placement:
                if task.milli:
                    found[task.node] = found.get(task.node, 0) + len(task.devices)
    return found
