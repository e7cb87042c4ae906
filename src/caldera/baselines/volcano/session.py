"""Volcano's session for one cycle (framework/session.go): what every action reads and writes.

The first phase of a cycle opens it (`session_for`, memoized on the cycle) and the later ones
find it: the future room, the queues' attributes with water-filled deserved (V2), the
Statement (what-ifs kept or discarded), the evictions staged in it, the jobs counted as
placed or pipelined, and those left starving (V5) for preempt and reclaim. Also the order
every action sorts jobs by (V3, `volcano_job_order`).

It decides nothing itself: the actions (`allocate`, `preempt`, `reclaim`, `close`) do.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

from caldera.baselines.common import FutureRoom, Staged, StagedEvictions
from caldera.baselines.ledger import RunningLedger, ledger_for
from caldera.baselines.proportion import QueueShare, Vector, water_fill
from caldera.baselines.volcano.nodeorder import nodeorder_place
from caldera.core.context import CycleContext
from caldera.core.snapshot import JobView
from caldera.model import GPU_MILLI, JobState, Node

__all__ = ["Pod", "Scope", "Session", "capacity", "session_for", "volcano_job_order"]

_SESSION = "volcano.session"

Pod = tuple[JobView, int]
"""A running task: its job and its index in the job's running placement."""

Scope = Sequence[int] | None
"""Nodes a job's tasks must stay on (one hard-topology domain), or None for anywhere."""


@dataclass
class Session:
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

    def starve_all(self, group: Sequence[JobView]) -> None:
        """Jobs of one pending group (one queue and priority) all starve, in their order."""
        if group:
            spec = group[0].spec
            self.starving.setdefault((spec.queue, spec.priority), []).extend(group)

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


def _open(cycle: CycleContext, one_tier: bool = False) -> Session:
    """Open the session: future room, queue attributes with water-filled deserved (V2)."""
    snapshot = cycle.snapshot
    gone = set(cycle.decided.evicted)
    # A room index of its own only while something is being released: allocate places in
    # idle room and pipelines onto future room within the same pass.
    future = FutureRoom.separate(cycle, gone)
    queues: dict[str, QueueShare] = {}

    # queue -> [allocated gpu, cpu, memory, requested gpu, cpu, memory, …]: running jobs'
    # (kept by the ledger), then the pending groups'
    held = ledger_for(cycle).held_without(gone)
    for key, group in cycle.eligible_groups:
        queue = key[0]
        spec = group[0].spec  # one shape per group: same request per task
        tasks = _tasks_of(key, group)
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
    water_fill(capacity(snapshot.nodes), queues.values())
    staged = Staged(cycle.room, future, place=nodeorder_place if one_tier else None)
    return Session(cycle, future, staged, StagedEvictions(staged), gone, queues, one_tier=one_tier)


_TASKS = attrgetter("spec.tasks")
_GROUP_TASKS: dict[Hashable, tuple[list[JobView], int]] = {}
_MAX_GROUPS = 4096  # groups whose sums are kept; beyond that, forgotten all at once


def _tasks_of(key: Hashable, group: list[JobView]) -> int:
    """The tasks of a pending group's jobs. A group waits cycle after cycle with the same
    jobs, or a few come (at its end, mostly) and go (from its head): its sum is kept (under
    its group key) with a copy of its members, and only the jobs between the longest run
    that starts both lists alike and the longest that ends both alike are read — list
    comparisons in C that pass the very same views by identity (equal views would have the
    same tasks), far cheaper than reading every job's tasks."""
    known = _GROUP_TASKS.get(key)
    if known is None:
        tasks: int = sum(map(_TASKS, group))
    else:
        old, tasks = known
        if old == group:
            return tasks
        head = _alike_from_start(old, group)
        tail = _alike_from_end(old, group, min(len(old), len(group)) - head)
        tasks += sum(map(_TASKS, group[head : len(group) - tail]))
        tasks -= sum(map(_TASKS, old[head : len(old) - tail]))
    if len(_GROUP_TASKS) >= _MAX_GROUPS:
        _GROUP_TASKS.clear()
    _GROUP_TASKS[key] = (group.copy(), tasks)
    return tasks


def _alike_from_start(a: list[JobView], b: list[JobView]) -> int:
    """How many items start both lists alike: halves compared in C."""
    low, high = 0, min(len(a), len(b))  # a[:low] == b[:low]; they differ at or before high
    if a[:high] == b[:high]:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def _alike_from_end(a: list[JobView], b: list[JobView], most: int) -> int:
    """How many items (at most `most`) end both lists alike: halves compared in C."""
    la, lb = len(a), len(b)
    low, high = 0, most  # the last `low` items alike; they differ within the last `high`
    if a[la - high :] == b[lb - high :]:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if a[la - middle : la - low] == b[lb - middle : lb - low]:
            low = middle
        else:
            high = middle
    return low


_CAPACITY: dict[int, tuple[tuple[Node, ...], Vector]] = {}


def capacity(nodes: tuple[Node, ...]) -> Vector:
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


def session_for(cycle: CycleContext, one_tier: bool = False) -> Session:
    """The cycle's session, opened by the first phase that asks (with its configuration)."""
    return cycle.memo(_SESSION, lambda: _open(cycle, one_tier))


def volcano_job_order(session: Session, job: JobView) -> tuple[int, int, float, str]:
    """V3, jobs inside a queue: 1. priority, high first; 2. not ready first; 3. creation
    (submit) time; 4. id."""
    ready = job.state is JobState.RUNNING and session.running(job) >= job.spec.min_available
    return (-job.spec.priority, 1 if ready else 0, job.spec.submit, job.id)
