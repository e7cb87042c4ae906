"""The tracked job: what every runtime keeps about a job, and how it becomes the cycle's
`JobView`.

The simulator, the service and the Kubernetes controller track the same facts — tasks that
are running or leaving (signalled, holding room until they are gone), progress, evictions,
holds and nominations; only how a task runs differs (a simulated batch, a process group, a
pod), so each runtime subclasses `TrackedTask`'s shape and `TrackedJob` with its own extras.
The same history therefore gives the same snapshot in every runtime.

Work accounting: `running_since` is set while the gang makes progress (at least
`min_available` tasks run), `work_base` is the useful work done before it, `saved_work` what
the last checkpoint preserved. A requeued job resumes from its last checkpoint; the
difference is lost work (`rewind_to_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from caldera.core import JobIndex, JobView, Nomination, TaskPlacement
from caldera.model import GPU_MILLI, JobSpec, JobState

__all__ = ["TaskT", "TrackedJob", "TrackedTask", "refresh_index"]


class TrackedTask(Protocol):
    """One task of one attempt, as a runtime tracks it."""

    rank: int
    placement: TaskPlacement
    leaving: bool  # signalled by an eviction; holds its room until it is gone
    kill_at: float | None  # end of its grace period (the simulator: when its room is free)
    done: bool  # ended (exited, deleted, released)
    exit_code: int | None  # None while running, or when nobody saw how it ended


TaskT = TypeVar("TaskT", bound=TrackedTask)


@dataclass(kw_only=True)
class TrackedJob(Generic[TaskT]):
    spec: JobSpec
    state: JobState
    tasks: list[TaskT] = field(default_factory=list)
    nomination: Nomination | None = None
    first_start: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    running_since: float | None = None  # while the gang makes progress
    work_base: float = 0.0  # useful seconds done before running_since
    saved_work: float = 0.0  # what the last checkpoint preserved
    checkpoint_seen: float | None = None
    reported_progress: float | None = None
    evictions: int = 0
    last_evicted_at: float | None = None
    evicted_for: str | None = None
    evict_reason: str | None = None
    signalled_at: float | None = None
    work_at_signal: float | None = None
    signal_gpu: int = 0
    hold_reason: str | None = None
    hold_since: float | None = None
    throttled_once: bool = False
    preempt_failed_at: float | None = None  # the core's back-off after a failed victim search
    cancel_requested: bool = False
    attempts: int = 0
    retries: int = 0
    exit_code: int | None = None
    reason: str | None = None
    lost_gpu_seconds: float = 0.0
    _view: JobView | None = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return self.spec.id

    def touch(self) -> None:
        """Something changed: the next snapshot needs a new view."""
        self._view = None

    @property
    def running(self) -> list[TaskT]:
        """Tasks of the running placement (not signalled to leave), in rank order."""
        return [t for t in self.tasks if not t.leaving]

    @property
    def releasing(self) -> list[TaskT]:
        return [t for t in self.tasks if t.leaving]

    def work_done(self, now: float) -> float:
        if self.running_since is None:
            return self.work_base
        return self.work_base + max(now - self.running_since, 0.0)

    def begin_leaving(self, tasks: tuple[int, ...], now: float, until: float) -> list[TaskT]:
        """Mark the tasks an eviction names (indexes into the running tasks; none: all) as
        leaving, holding their room until `until`. A gang that drops below its
        `min_available` stops making progress: its work is frozen as of the signal. Returns
        the leaving tasks."""
        running = self.running
        chosen = set(tasks) if tasks else set(range(len(running)))
        leaving = [t for i, t in enumerate(running) if i in chosen]
        staying = len(running) - len(leaving)
        if leaving and self.running_since is not None and staying < self.spec.min_available:
            self.work_at_signal = self.work_done(now)
            self.signal_gpu = sum(t.placement.gpu for t in running)
            self.work_base = self.work_at_signal
            self.running_since = None
        for task in leaving:
            task.leaving = True
            task.kill_at = until
        self.touch()
        return leaving

    def rewind_to_checkpoint(self, now: float) -> float:
        """The gang stopped (evicted, lost, retried): from now on it resumes from the last
        checkpoint it reached. Returns the GPU-seconds of work that are lost."""
        work = self.work_at_signal
        if work is None:
            work = self.work_done(now)
            self.signal_gpu = self.signal_gpu or self.spec.gpu * self.spec.tasks
        saved = self.spec.checkpoint.resume_point(work, self.saved_work)
        lost = self.signal_gpu / GPU_MILLI * max(work - saved, 0.0)
        self.lost_gpu_seconds += lost
        self.work_base = saved
        self.saved_work = saved
        self.running_since = None
        self.work_at_signal = None
        self.signal_gpu = 0
        self.evicted_for = None
        self.signalled_at = None
        self.touch()
        return lost

    def view(self) -> JobView:
        if self._view is None:
            releasing: Sequence[TaskT] = self.releasing
            self._view = JobView(
                spec=self.spec,
                state=self.state,
                placement=tuple(t.placement for t in self.running),
                releasing=tuple(t.placement for t in releasing),
                release_at=max((t.kill_at or 0.0 for t in releasing), default=None),
                evicted_for=self.evicted_for,
                first_start=self.first_start,
                running_since=self.running_since,
                work_base=self.work_base,
                saved_work=self.saved_work,
                reported_progress=self.reported_progress,
                evictions=self.evictions,
                last_evicted_at=self.last_evicted_at,
                hold_reason=self.hold_reason,
                nomination=self.nomination,
                throttled_once=self.throttled_once,
                preempt_failed_at=self.preempt_failed_at,
            )
        return self._view


class _Viewable(Protocol):
    def view(self) -> JobView: ...


def refresh_index(index: JobIndex, stale: set[str], jobs: Mapping[str, _Viewable]) -> None:
    """Renew the views of the jobs that changed since the last cycle (and forget those no
    longer in `jobs`), so that with thousands of jobs a cycle costs what changed."""
    for job_id in stale:
        job = jobs.get(job_id)
        if job is None:
            index.drop(job_id)
        else:
            index.put(job.view())
    stale.clear()
