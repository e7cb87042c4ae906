"""The working state of one cycle: a scratch room, queue usage and the decisions so far.

Phases read the snapshot and write only here. A `CycleContext` never outlives `cycle.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast

from caldera.core.config import PolicyConfig
from caldera.core.decisions import (
    Decisions,
    Evict,
    Hold,
    Nominate,
    Release,
    Start,
    ThrottleOff,
    ThrottleOn,
)
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView, Snapshot
from caldera.model import GPU_MILLI, JobState, Queue, Resources

__all__ = ["CycleContext", "QueueUsage", "shape_key"]

T = TypeVar("T")


def _rank(job: JobView) -> tuple[int, float, str]:
    return job.spec.rank


def shape_key(job: JobView) -> int:
    """Jobs with equal keys fit or fail alike on the same room."""
    return job.spec.shape


@dataclass(slots=True)
class QueueUsage:
    """A queue's quotas and what it holds during this cycle (running + releasing + started)."""

    queue: Queue
    deserved: Resources
    allocated: Resources = field(default_factory=Resources)
    releasing: int = 0  # milli-GPUs of `allocated` already signalled to leave

    @property
    def share(self) -> float:
        """allocated / deserved, the larger over the resources that have a deserved value."""
        share = 0.0
        if self.deserved.gpu > 0:
            share = self.allocated.gpu / self.deserved.gpu
        if self.deserved.cpu > 0:
            share = max(share, self.allocated.cpu / self.deserved.cpu)
        if self.deserved.memory > 0:
            share = max(share, self.allocated.memory / self.deserved.memory)
        if self.deserved == Resources():
            return float("inf") if self.allocated.gpu > 0 else 0.0
        return share

    def within_capability(self, extra: Resources) -> bool:
        if self.queue.capability is None:
            return True
        return (self.allocated + extra).fits_in(self.queue.capability)


def _default_deserved(snapshot: Snapshot) -> dict[str, Resources]:
    """Queues without a deserved GPU value get the cluster split by weight."""
    total_gpu = sum(node.gpus for node in snapshot.nodes) * GPU_MILLI
    weights = sum(max(q.weight, 0) for q in snapshot.queues.values()) or 1
    result: dict[str, Resources] = {}
    for name, queue in snapshot.queues.items():
        deserved = queue.deserved or Resources()
        if deserved.gpu <= 0:
            share = total_gpu * max(queue.weight, 0) // weights
            deserved = Resources(share, deserved.cpu, deserved.memory)
        result[name] = deserved
    return result


@dataclass
class CycleContext:
    snapshot: Snapshot
    room: Room
    jobs: Mapping[str, JobView] = field(init=False)
    usage: dict[str, QueueUsage] = field(init=False)
    eligible: list[JobView] = field(default_factory=list)
    unplaced: list[JobView] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    nominations: list[Nominate] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    releases: list[Release] = field(default_factory=list)
    throttles: list[ThrottleOn | ThrottleOff] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    evicted: set[str] = field(default_factory=set)
    blocked: dict[str, list[TaskPlacement]] = field(default_factory=dict)
    evicted_gpu: int = 0
    _unplaced_sorted: list[JobView] | None = None
    _memo: dict[str, object] = field(default_factory=dict)
    wakeups: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        snapshot = self.snapshot
        self.jobs = snapshot.by_id
        deserved = _default_deserved(snapshot)
        self.usage = {
            name: QueueUsage(queue, deserved[name]) for name, queue in snapshot.queues.items()
        }
        held: dict[str, list[int]] = {name: [0, 0, 0, 0] for name in self.usage}
        by_state = snapshot.by_state
        for job in (*by_state[JobState.RUNNING], *by_state[JobState.RELEASING]):
            totals = held.get(job.spec.queue)
            if totals is not None:
                spec = job.spec
                tasks = len(job.placement) + len(job.releasing)
                totals[0] += spec.gpu * tasks
                totals[1] += spec.cpu * tasks
                totals[2] += spec.memory * tasks
                totals[3] += spec.gpu * len(job.releasing)
        for name, (gpu, cpu, memory, leaving) in held.items():
            self.usage[name].allocated = Resources(gpu, cpu, memory)
            self.usage[name].releasing = leaving

    def memo(self, name: str, build: Callable[[], T]) -> T:
        """A value computed once per cycle and shared between phases."""
        if name not in self._memo:
            self._memo[name] = build()
        return cast(T, self._memo[name])

    def unplaced_in_order(self) -> list[JobView]:
        """Jobs allocate could not place, highest priority first (sorted once per cycle)."""
        if self._unplaced_sorted is None or len(self._unplaced_sorted) != len(self.unplaced):
            ordered = self.memo("eligible_in_order", lambda: sorted(self.eligible, key=_rank))
            waiting = {job.id for job in self.unplaced}
            in_order = [job for job in ordered if job.id in waiting]
            if len(in_order) != len(waiting):  # a phase added jobs that were not eligible
                in_order = sorted(self.unplaced, key=_rank)
            self._unplaced_sorted = in_order
        return self._unplaced_sorted

    @property
    def now(self) -> float:
        return self.snapshot.now

    @property
    def config(self) -> PolicyConfig:
        return self.snapshot.config

    @property
    def eviction_budget(self) -> int:
        """Milli-GPUs that may still be signalled this cycle (at least one node's worth)."""
        room = self.room
        limit = max(self.config.eviction_budget * room.capacity_gpus, room.max_gpus)
        return int(limit * GPU_MILLI) - self.evicted_gpu

    def start(self, job: JobView, placement: tuple[TaskPlacement, ...], grow: bool = False) -> None:
        """Record a start; the room is already taken by the caller."""
        self.starts.append(Start(job.id, placement, grow))
        self.started.add(job.id)
        usage = self.usage.get(job.spec.queue)
        if usage is not None:
            usage.allocated = usage.allocated + job.spec.task_request.scaled(len(placement))

    def evict(self, evict: Evict, victim: JobView) -> None:
        self.evictions.append(evict)
        self.evicted.add(victim.id)
        self.evicted_gpu += evict.gpu
        usage = self.usage.get(victim.spec.queue)
        if usage is not None:
            usage.releasing += evict.gpu

    def block(self, job_id: str, placement: tuple[TaskPlacement, ...]) -> None:
        """Keep the free part of a reserved placement away from everyone else this cycle."""
        blocked = self.blocked.setdefault(job_id, [])
        room = self.room
        for task in placement:
            free = room.free[task.node]
            devices = tuple(d for d in task.devices if free[d] >= task.milli)
            if not devices and task.devices:
                continue
            whole = len(devices) == len(task.devices)
            cpu = task.cpu if whole and room.cpu[task.node] >= task.cpu else 0
            memory = task.memory if whole and room.memory[task.node] >= task.memory else 0
            part = TaskPlacement(task.node, devices, task.milli, cpu, memory)
            room.take(part)
            blocked.append(part)

    def unblock(self, job_id: str) -> None:
        for part in self.blocked.pop(job_id, []):
            self.room.give(part)

    def decisions(self) -> Decisions:
        wakeups = [t for t in self.wakeups if t > self.now]
        return Decisions(
            starts=tuple(self.starts),
            evictions=tuple(self.evictions),
            nominations=tuple(self.nominations),
            holds=tuple(self.holds),
            releases=tuple(self.releases),
            throttles=tuple(self.throttles),
            wakeup=min(wakeups) if wakeups else None,
            notes=tuple(self.notes),
        )
