"""What the baseline policies share: their settings, pod-level bookkeeping and two room views.

The baselines stand for Kubernetes-based schedulers, which think in pods (tasks), not gangs:
- `baseline_defaults`: the settings every baseline runs under (BASELINES.md: 30 s grace period,
  no emergency checkpoint, no throttle, no cooldown, no eviction budget).
- `missing_tasks`, `pending_work`: a job's pods that are neither running nor terminating are
  pending pods, also for a job already running ("hung jobs' missing pods are pending pods").
- `TaskCuts`: evictions of single tasks, translated into the positions the runtime expects;
  `StagedEvictions` chooses them inside a what-if and turns the kept ones into decisions.
- `FutureRoom`: idle room plus the room held by terminating tasks — what Volcano calls a
  node's FutureIdle and what a preemptor in kube-scheduler may count on once its victims go.
- `Staged`: an undo log over both views, so a what-if can be kept or discarded (Volcano's
  Statement).
- `rerun_after_change`: the event-driven simulator runs a cycle at events only; a scheduler
  that loops every second would look again a second after starting jobs that a waiting
  preemptor could take, so ask for that.

Hard rules every baseline keeps (Kubernetes has them too): never a node over capacity, never a
queue over its capability, never a victim at or above priority 1000, conformance-protected, or
labelled protected (rendered as `volcano.sh/preemptable: "false"` on Volcano).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from operator import attrgetter, is_

from caldera.baselines.ledger import ledger_for
from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext
from caldera.core.decisions import Evict, EvictReason
from caldera.core.placement import node_allows, place_job
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.core.victims import is_protected
from caldera.model import GPU_MILLI, JobSpec, Resources, TopologyMode

__all__ = [
    "FOLLOW_UP",
    "FutureRoom",
    "PlaceOne",
    "Staged",
    "StagedEvictions",
    "TaskCuts",
    "baseline_defaults",
    "can_host",
    "domain_nodes",
    "domain_of",
    "is_protected",
    "missing_tasks",
    "pending_work",
    "place_one",
    "rerun_after_change",
    "running_with_missing",
    "sorted_by_rank",
]

FOLLOW_UP = 1.0
"""Seconds between two scheduling loops of the systems the baselines stand for."""


def baseline_defaults(config: PolicyConfig) -> PolicyConfig:
    """BASELINES.md: grace period 30 s (the Kubernetes default), no scheduler-driven
    (emergency) checkpoint, no submission throttle, no cooldown, no per-cycle eviction budget."""
    return replace(
        config,
        grace_period=30.0,
        emergency_checkpoint=False,
        throttle=False,
        cooldown=0.0,
        eviction_budget=1.0,
    )


def missing_tasks(job: JobView) -> int:
    """Pods of a running job that are neither running nor terminating: they are pending pods
    again (the job's controller recreates a pod once the evicted one is gone)."""
    return max(job.spec.tasks - len(job.placement) - len(job.releasing), 0)


def pending_work(cycle: CycleContext) -> list[JobView]:
    """Jobs with pending pods, in no particular order (each policy orders them its own way):
    the pending jobs enqueue admitted and running jobs with missing pods, gang-hung or
    elastic. Jobs evicted earlier in this cycle are left out."""
    jobs = [job for _, group in cycle.eligible_groups for job in group]
    jobs.extend(running_with_missing(cycle))
    return jobs


_RANK = attrgetter("spec.rank")
_SORTED: dict[tuple[str, bool], tuple[list[JobView], list[JobView]]] = {}
_MAX_SORTED = 256  # sorted backlogs kept; beyond that, forgotten all at once


def sorted_by_rank(slot: str, jobs: list[JobView], reverse: bool = False) -> list[JobView]:
    """`jobs` by rank (priority, submit time, id; `reverse`: last first), a new list. A
    backlog that waits is handed over cycle after cycle as the very same job views in the
    same order: then the sorted copy kept under `slot` (a policy and queue) is copied, not
    sorted again (checked object by object, in C)."""
    known = _SORTED.get((slot, reverse))
    if known is not None and len(known[0]) == len(jobs) and all(map(is_, known[0], jobs)):
        return known[1].copy()
    ranked = sorted(jobs, key=_RANK, reverse=reverse)
    if len(_SORTED) >= _MAX_SORTED:
        _SORTED.clear()
    _SORTED[(slot, reverse)] = (jobs, ranked)
    return ranked.copy()


def running_with_missing(cycle: CycleContext) -> list[JobView]:
    """Running jobs with pods neither running nor terminating (gang-hung or elastic), except
    those evicted earlier in this cycle, in no particular order (kept by the ledger)."""
    evicted = cycle.decided.evicted
    missing = ledger_for(cycle).missing
    return [job for job_id, job in missing.items() if job_id not in evicted]


def can_host(room: Room, index: int, spec: JobSpec) -> bool:
    """Node predicates: GPU model and a node big enough for one task at all."""
    node = room.nodes[index]
    return (
        node_allows(room, index, spec.gpu_models)
        and node.gpus * GPU_MILLI >= spec.gpu
        and node.cpu >= spec.cpu
        and node.memory >= spec.memory
    )


def domain_nodes(room: Room, spec: JobSpec) -> list[tuple[int, ...]] | None:
    """The tier-N domains a hard-topology gang must fit in (None: no such constraint).

    The platform renders `topology: {mode: hard}` as a required pod affinity on the switch
    label, which Kubernetes and Volcano's network-topology mode both honour.
    """
    topology = spec.topology
    if topology is None or topology.mode is not TopologyMode.HARD or spec.tasks == 1:
        return None
    domains = room.tier1_nodes if topology.highest_tier <= 1 else room.tier2_nodes
    return [tuple(nodes) for _, nodes in sorted(domains.items())]


def domain_of(room: Room, spec: JobSpec, node: int) -> tuple[int, ...] | None:
    """The hard-topology domain holding `node`, where the gang's other pods must go."""
    topology = spec.topology
    if topology is None or topology.mode is not TopologyMode.HARD or spec.tasks == 1:
        return None
    info = room.nodes[node]
    if topology.highest_tier <= 1:
        return tuple(room.tier1_nodes[info.tier1])
    return tuple(room.tier2_nodes[info.tier2])


PlaceOne = Callable[[Room, JobSpec, Sequence[int] | None], TaskPlacement | None]
"""(room, job, nodes allowed or None) -> one pod placed (room taken), or None."""


def place_one(room: Room, spec: JobSpec, within: Sequence[int] | None) -> TaskPlacement | None:
    """One pod on the best node for it (binpack: the fullest node that fits), room taken."""
    placed = place_job(room, spec, minimum=1, maximum=1, within=within)
    return placed[0] if placed else None


class TaskCuts:
    """Tasks cut from running jobs this cycle, by their index in the snapshot's placement.

    The runtime applies evictions in order and each one shortens the job's running placement,
    so a later eviction of the same job must name positions in what is left: `cut` does that
    translation.
    """

    def __init__(self) -> None:
        self._left: dict[str, list[int]] = {}

    def cut(self, job: JobView, indexes: Iterable[int]) -> tuple[int, ...]:
        """Record the cut; return the positions the runtime will see for these tasks."""
        left = self._left.setdefault(job.id, list(range(len(job.placement))))
        chosen = sorted(set(indexes))
        positions = tuple(left.index(i) for i in chosen)
        for i in chosen:
            left.remove(i)
        return positions


class FutureRoom:
    """Idle room plus room held by terminating tasks (Volcano's FutureIdle, the room a
    nominated pod waits for).

    Two ways to get one. `separate`: a room index of its own — the nodes less every running
    pod, kept from cycle to cycle by the ledger (baselines/ledger.py) and handed out as a
    working copy — for a phase that still places pods in idle room while it counts on
    future room (Volcano's allocate pipelines); the caller takes into it what the cycle has
    started so far. `in_place`: the cycle's own working room, with the leaving tasks given
    back — only for phases after the last start of the cycle, since idle and future room are
    then one (and the cycle rolls its working room back when it ends). With nothing leaving,
    the idle room already is the future room: `shared` says so.
    """

    def __init__(self, room: Room, shared: bool) -> None:
        self.room = room
        self.shared = shared

    @classmethod
    def separate(cls, cycle: CycleContext, gone: set[str]) -> FutureRoom:
        ledger = ledger_for(cycle)
        if not ledger.leaving(cycle.snapshot, gone):
            return cls(cycle.room, shared=True)
        return cls(ledger.future_room(gone), shared=False)

    @classmethod
    def in_place(cls, cycle: CycleContext, gone: set[str]) -> FutureRoom:
        idle = cycle.room
        for task in ledger_for(cycle).leaving(cycle.snapshot, gone):
            idle.give(task)
        return cls(idle, shared=True)

    def free_on(self, index: int) -> Resources:
        room = self.room
        return Resources(room.free_milli(index), room.cpu[index], room.memory[index])


class Staged:
    """An undo log over the cycle's idle room, the future room and any other state.

    `mark()` then `rollback(mark)` undoes everything done since, newest first; keeping the
    changes needs nothing (Volcano's Statement: commit or discard).
    """

    def __init__(self, idle: Room, future: FutureRoom, place: PlaceOne | None = None) -> None:
        self.idle = idle
        self.future = future.room
        self.shared = future.shared  # one room for both views: change it once
        self.place: PlaceOne = place_one if place is None else place  # the node choice
        self._undo: list[Callable[[], None]] = []

    def mark(self) -> int:
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        undo = self._undo
        while len(undo) > mark:
            undo.pop()()

    def on_undo(self, action: Callable[[], None]) -> None:
        self._undo.append(action)

    def place_idle(self, spec: JobSpec, within: Sequence[int] | None) -> TaskPlacement | None:
        """One pod on the best node with idle room for it (taken in both views), or None."""
        task = self.place(self.idle, spec, within)
        if task is not None:
            self._mirror_take(task)
        return task

    def _mirror_take(self, task: TaskPlacement) -> None:
        """`task` was just taken in idle room: take it in the future view too (logged)."""
        if self.shared:
            self._undo.append(lambda: self.idle.give(task))
            return
        self.future.take(task)

        def undo() -> None:
            self.idle.give(task)
            self.future.give(task)

        self._undo.append(undo)

    def place_future(
        self, spec: JobSpec, within: Sequence[int] | None, hold_idle: bool = False
    ) -> TaskPlacement | None:
        """One pod on the best node counting room still being released, or None.

        `hold_idle`: the idle part of that room is held too, for the rest of the cycle, so
        that later placements in idle room cannot take what this pod counts on (and the
        future view always holds at least the idle one).
        """
        task = self.place(self.future, spec, within)
        if task is None:
            return None
        self._undo.append(lambda: self.future.give(task))
        if hold_idle and not self.shared:
            for part in _idle_parts(self.idle, task):
                self.idle.take(part)
                self._undo.append(lambda part=part: self.idle.give(part))  # type: ignore[misc]
        return task

    def take_future(self, task: TaskPlacement) -> None:
        """A task counted on room that is still being released (pipelined / nominated)."""
        self.future.take(task)
        self._undo.append(lambda: self.future.give(task))

    def free_future(self, task: TaskPlacement) -> None:
        """A victim's task signalled to leave: its room is future room from now on."""
        self.future.give(task)
        self._undo.append(lambda: self.future.take(task))


def _idle_parts(idle: Room, task: TaskPlacement) -> list[TaskPlacement]:
    """What of `task`'s devices, CPU and memory is idle now, one device at a time."""
    node = task.node
    parts = [
        TaskPlacement(node, (device,), min(idle.free[node][device], task.milli))
        for device in task.devices
        if idle.free[node][device] > 0
    ]
    cpu = min(idle.cpu[node], task.cpu)
    memory = min(idle.memory[node], task.memory)
    if cpu or memory:
        parts.append(TaskPlacement(node, (), 0, cpu, memory))
    return parts


class StagedEvictions:
    """Pod evictions inside a `Staged` log: chosen one by one, then kept as decisions (one per
    victim job and preemptor) or undone with the rest of the what-if."""

    def __init__(self, staged: Staged) -> None:
        self.staged = staged
        self.cut: dict[str, set[int]] = {}  # staged or kept, by victim job
        self._chosen: list[tuple[JobView, int]] = []
        self._positions = TaskCuts()

    def running(self, job: JobView) -> int:
        """Tasks of a running job still running once this cycle's evictions apply."""
        return len(job.placement) - len(self.cut.get(job.id, ()))

    def is_cut(self, job: JobView, index: int) -> bool:
        cut = self.cut.get(job.id)
        return cut is not None and index in cut

    def mark(self) -> int:
        return len(self._chosen)

    def stage(self, victim: JobView, index: int) -> None:
        """Signal one task inside the what-if: its room becomes future room."""
        self.staged.free_future(victim.placement[index])
        cut = self.cut.setdefault(victim.id, set())
        cut.add(index)
        self._chosen.append((victim, index))

        def undo() -> None:
            cut.discard(index)
            self._chosen.pop()

        self.staged.on_undo(undo)

    def commit(
        self, cycle: CycleContext, first: int, preemptor: JobView, reason: EvictReason
    ) -> None:
        """Decide the evictions staged since `first` (a `mark()`), one per victim job."""
        by_victim: dict[str, tuple[JobView, list[int]]] = {}
        for victim, index in self._chosen[first:]:
            by_victim.setdefault(victim.id, (victim, []))[1].append(index)
        for victim, indexes in by_victim.values():
            positions = self._positions.cut(victim, indexes)
            gpu = victim.spec.gpu * len(indexes)
            cycle.evict(Evict(victim.id, reason, preemptor.id, positions, gpu), victim)


def rerun_after_change(
    cycle: CycleContext,
    waiting: Iterable[JobView],
    could_take: Callable[[JobView, JobView], bool],
) -> None:
    """Ask for another cycle one loop period later when a loop every second would decide
    something new there: this cycle started a job that a preemptor still `waiting` for room
    could take as a victim (`could_take(started, preemptor)`) — a job started in a cycle is
    no victim in that cycle. Nothing else changes a baseline's answer between events."""
    preemptors = [job for job in waiting if job.spec.may_preempt]
    if not preemptors or not cycle.decided.starts:
        return
    jobs = cycle.jobs
    for start in cycle.decided.starts:
        started = jobs.get(start.job)
        if started is not None and any(could_take(started, p) for p in preemptors):
            cycle.decided.wakeups.append(cycle.now + FOLLOW_UP)
            return
