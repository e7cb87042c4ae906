"""What a cycle decides. Runtimes apply these; nothing else changes the world.

All frozen: a runtime may log, persist or replay them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from caldera.core.config import PolicyConfig
from caldera.core.jobindex import GroupKey
from caldera.core.room import TaskPlacement
from caldera.core.shortcuts.memo import SearchMemo
from caldera.core.snapshot import Nomination
from caldera.model import JobSpec

__all__ = [
    "Decisions",
    "Evict",
    "EvictReason",
    "Hold",
    "Nominate",
    "Release",
    "Start",
    "ThrottleOff",
    "ThrottleOn",
    "WaitReason",
    "Waiting",
    "release_timing",
]


def release_timing(spec: JobSpec, config: PolicyConfig) -> tuple[float, bool]:
    """Seconds from an eviction's signal until the victim's room is free, and whether it
    saves its work: its emergency checkpoint, when it takes one that fits in the grace period
    (then it releases as soon as the checkpoint is written); else the whole grace period."""
    ckpt = spec.checkpoint
    if config.emergency_checkpoint and ckpt.on_sigterm and ckpt.cost <= config.grace_period:
        return ckpt.cost, True
    return config.grace_period, False


class EvictReason(StrEnum):
    PREEMPT = "preempt"  # same queue, higher priority
    RECLAIM = "reclaim"  # another queue takes back what it deserves
    CANCEL = "cancel"
    WINDOW = "window"  # the queue's time window closed
    HEALTH = "health"  # its GPU is sick (runtimes only: the core never decides this)


@dataclass(frozen=True, slots=True)
class Start:
    """Run `placement` for `job`. `grow`: extra tasks of a job already running."""

    job: str
    placement: tuple[TaskPlacement, ...]
    grow: bool = False


@dataclass(frozen=True, slots=True)
class Evict:
    """Signal a running job (or some of its tasks) to give way.

    `tasks` are indexes into the job's running placement as it stands when this eviction is
    applied — after any earlier eviction of the same job in the same decisions (caldera emits
    at most one per job per cycle). Empty means every task: the job is requeued once its room
    is released.

    `release_at` is when the freed room is expected back, and `checkpoint` whether the victim
    saves its work on the signal: its emergency checkpoint fits in the grace period, so it
    releases when the checkpoint is written; otherwise at the end of the grace period, keeping
    its last periodic checkpoint (DESIGN §4.3, §6). The cycle fills both in
    (`CycleContext.evict`), so no runtime recomputes the rule.
    """

    job: str
    reason: EvictReason
    preemptor: str | None = None
    tasks: tuple[int, ...] = ()
    gpu: int = 0  # milli-GPUs this eviction frees
    release_at: float = field(default=0.0, compare=False)
    checkpoint: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Nominate:
    """Reserve room for a preemptor (or drop its reservation when `nomination` is None)."""

    job: str
    nomination: Nomination | None


@dataclass(frozen=True, slots=True)
class Hold:
    job: str
    reason: str  # "window" | "throttle"


@dataclass(frozen=True, slots=True)
class Release:
    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class ThrottleOn:
    queue: str
    job: str


@dataclass(frozen=True, slots=True)
class ThrottleOff:
    queue: str
    reason: str  # "started" | "timeout" | "gone"


class WaitReason(StrEnum):
    """Why a pending job did not start this cycle (see `caldera.core.waiting`)."""

    CLOSED = "closed"  # its queue is Closed
    CAPABILITY = "capability"  # its gang exceeds its queue's cap, or the queue is at its cap
    VICTIMS = "victims"  # room is reserved for it; its victims have yet to release it
    NO_VICTIMS = "no-victims"  # no room, and no running job may give way to it
    TOPOLOGY = "topology"  # enough GPUs free, but not inside one domain its hard topology allows
    FRAGMENTED = "fragmented"  # enough GPUs free, but no node or NVLink island fits its tasks
    NO_ROOM = "no-room"  # not enough free GPUs


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why the jobs of a pending group that are still pending after this cycle did not start,
    or — with `job` — why that one job (a preemptor holding reserved room) did not."""

    group: GroupKey
    reason: WaitReason
    detail: str  # one line for people: the numbers behind the reason
    job: str | None = None


@dataclass(frozen=True, slots=True)
class Decisions:
    starts: tuple[Start, ...] = ()
    evictions: tuple[Evict, ...] = ()
    nominations: tuple[Nominate, ...] = ()
    holds: tuple[Hold, ...] = ()
    releases: tuple[Release, ...] = ()
    throttles: tuple[ThrottleOn | ThrottleOff, ...] = ()
    preempt_misses: tuple[str, ...] = ()  # searched for victims, found none: back off
    wakeup: float | None = None  # the next time the cycle must run even if nothing happens
    notes: tuple[str, ...] = field(default=(), compare=False)
    # Explains, changes nothing: left out of equality so decisions compare on what they do.
    waiting: tuple[Waiting, ...] = field(default=(), compare=False)
    # What the next cycle may reuse (core/shortcuts/memo.py): hand it back with the next snapshot.
    memo: SearchMemo | None = field(default=None, compare=False, repr=False)
    # The snapshot's `start_budget` ran out: jobs that might have started were not reached,
    # so the next cycle is due as soon as the budget grows again.
    paced: bool = False

    @property
    def empty(self) -> bool:
        return not (
            self.starts
            or self.evictions
            or self.nominations
            or self.holds
            or self.releases
            or self.throttles
        )
