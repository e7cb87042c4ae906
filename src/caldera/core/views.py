"""What the cycle knows about each job, and the small records that go with it."""

from __future__ import annotations

from dataclasses import dataclass, field

from caldera.core.room import TaskPlacement
from caldera.model import JobSpec, JobState

__all__ = ["JobView", "Nomination", "PendingVictim", "Throttle"]


@dataclass(frozen=True, slots=True)
class PendingVictim:
    """A victim of a plan not signalled yet: the whole job (`tasks` empty) or those tasks.
    `at`: a timed eviction — signal it no earlier than then, just after its next periodic
    checkpoint (core/timing.py); None: as soon as the eviction budget allows."""

    job: str
    tasks: tuple[TaskPlacement, ...] = ()
    at: float | None = None


@dataclass(frozen=True, slots=True)
class Nomination:
    """Room promised to a preemptor: where it will run and whose eviction frees it.

    `pending` are the victims of the plan not signalled yet (the per-cycle eviction budget
    can spread one plan over several cycles).
    """

    placement: tuple[TaskPlacement, ...]
    victims: tuple[str, ...]
    pending: tuple[PendingVictim, ...]
    since: float
    reason: str = "preempt"

    @property
    def pending_victims(self) -> tuple[str, ...]:
        return tuple(victim.job for victim in self.pending)


@dataclass(frozen=True, slots=True)
class Throttle:
    """A queue in waiting mode for one large job (DESIGN §4.4)."""

    queue: str
    job: str
    since: float


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the cycle sees it: its spec plus runtime facts at snapshot time.

    `placement` are the tasks running now; `releasing` the tasks signalled and still holding
    room until `release_at`. Work is in seconds of useful progress: `work_base` as of
    `running_since` (set only while the job progresses, so a view stays valid as time passes),
    `saved_work` what the last checkpoint preserved.
    """

    spec: JobSpec
    state: JobState
    placement: tuple[TaskPlacement, ...] = ()
    releasing: tuple[TaskPlacement, ...] = ()
    release_at: float | None = None
    evicted_for: str | None = None
    first_start: float | None = None
    running_since: float | None = None
    work_base: float = 0.0
    saved_work: float = 0.0
    reported_progress: float | None = None
    evictions: int = 0
    last_evicted_at: float | None = None
    hold_reason: str | None = None
    nomination: Nomination | None = None
    throttled_once: bool = False
    preempt_failed_at: float | None = None  # last time a search for victims found none
    id: str = field(init=False, compare=False)  # = spec.id, read very often

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", self.spec.id)

    @property
    def gpu_held(self) -> int:
        """Milli-GPUs this job holds now, running or releasing."""
        return self.spec.gpu * (len(self.placement) + len(self.releasing))

    @property
    def running_tasks(self) -> int:
        return len(self.placement)

    def work_done(self, now: float) -> float:
        """Seconds of useful work done by `now`."""
        if self.running_since is None:
            return self.work_base
        return self.work_base + max(now - self.running_since, 0.0)

    def progress(self, now: float) -> float:
        """Fraction done in [0, 1]: reported by the job, else work over expected duration."""
        if self.reported_progress is not None:
            return min(max(self.reported_progress, 0.0), 1.0)
        expected = self.spec.expected_duration
        if expected and expected > 0:
            return min(self.work_done(now) / expected, 1.0)
        return 0.0
