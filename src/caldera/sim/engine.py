"""The simulator: a virtual clock driving the same cycle every runtime uses (DESIGN §6).

Events at one instant are applied together, then the cycle runs (again, while it releases
held jobs) and its decisions are applied. Timers the cycle asks for (grace-period ends,
throttle timeouts, cooldowns, window edges) come back as wake-ups. Nothing reads the wall
clock; the same scenario always gives the same result.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from caldera.config import Scenario, Submission
from caldera.core import (
    Decisions,
    Evict,
    EvictReason,
    JobIndex,
    JobView,
    Nomination,
    Policy,
    Room,
    Snapshot,
    TaskPlacement,
    Throttle,
    ThrottleOff,
    ThrottleOn,
    admit,
    run,
)
from caldera.model import GPU_MILLI, IllegalTransition, JobSpec, JobState, check_transition
from caldera.policies import get_policy
from caldera.sim.recorder import Recorder

__all__ = ["SimJob", "Simulator", "simulate"]

# Event kinds in the order they apply at one instant: room comes back before anyone asks.
# A cancel at the submit instant applies to the submitted job.
_RELEASE, _FINISH, _SUBMIT, _CANCEL, _WAKEUP = range(5)
_MAX_CYCLES_PER_INSTANT = 8


@dataclass
class _Batch:
    """Tasks signalled to leave, holding room until `at`."""

    at: float
    tasks: list[TaskPlacement]
    emergency: bool


@dataclass
class SimJob:
    """A job's mutable simulated state; `view()` freezes it for a snapshot."""

    submission: Submission
    state: JobState = JobState.PENDING
    placement: list[TaskPlacement] = field(default_factory=list)
    batches: dict[int, _Batch] = field(default_factory=dict)
    first_start: float | None = None
    end: float | None = None
    running_since: float | None = None
    work_base: float = 0.0
    saved_work: float = 0.0
    evictions: int = 0
    last_evicted_at: float | None = None
    lost_gpu_seconds: float = 0.0
    hold_reason: str | None = None
    hold_since: float = 0.0
    nomination: Nomination | None = None
    throttled_once: bool = False
    preempt_failed_at: float | None = None
    evicted_for: str | None = None
    evict_reason: EvictReason | None = None
    cancel_requested: bool = False
    submitted: bool = False
    version: int = 0
    hung_since: float | None = None
    _view: JobView | None = None
    _dirty: set[str] | None = None  # the simulator's set of jobs whose view must be renewed

    @property
    def spec(self) -> JobSpec:
        return self.submission.spec

    def touch(self) -> None:
        self._view = None
        if self._dirty is not None:
            self._dirty.add(self.submission.spec.id)

    def work_done(self, now: float) -> float:
        if self.running_since is None:
            return self.work_base
        return self.work_base + (now - self.running_since)

    def view(self) -> JobView:
        if self._view is None:
            releasing = tuple(t for b in self.batches.values() for t in b.tasks)
            release_at = max((b.at for b in self.batches.values()), default=None)
            self._view = JobView(
                spec=self.spec,
                state=self.state,
                placement=tuple(self.placement),
                releasing=releasing,
                release_at=release_at,
                evicted_for=self.evicted_for,
                first_start=self.first_start,
                running_since=self.running_since,
                work_base=self.work_base,
                saved_work=self.saved_work,
                evictions=self.evictions,
                last_evicted_at=self.last_evicted_at,
                hold_reason=self.hold_reason,
                nomination=self.nomination,
                throttled_once=self.throttled_once,
                preempt_failed_at=self.preempt_failed_at,
            )
        return self._view


class Simulator:
    """Replays one scenario under one policy."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.config = scenario.config
        self.policy = policy if policy is not None else get_policy(self.config.name)
        self.nodes = scenario.nodes
        self.room = Room(self.nodes)
        self.index = JobIndex()
        self._dirty: set[str] = set()
        self.queues = {q.name: q for q in scenario.queues}
        self.throttles: dict[str, Throttle] = {}
        self.jobs: dict[str, SimJob] = {}
        self.active: dict[str, SimJob] = {}
        self.now = 0.0
        self.recorder = Recorder(self)
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._batch_ids = 0
        self._wakeups: set[float] = set()
        self._progress = progress
        for submission in scenario.submissions:
            self._push(submission.spec.submit, _SUBMIT, submission.spec.id)
            self.jobs[submission.spec.id] = SimJob(submission, _dirty=self._dirty)
            if submission.cancel_at is not None:
                self._push(submission.cancel_at, _CANCEL, submission.spec.id)

    # -- event queue -----------------------------------------------------------------------

    def _push(self, t: float, kind: int, job: str, data: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, job, data))

    def run(self) -> Simulator:
        until = self.scenario.until
        heap = self._heap
        instants = 0
        while heap:
            t = heap[0][0]
            if until is not None and t > until:
                self.recorder.advance(until)
                self.now = until
                break
            self.recorder.advance(t)
            self.now = t
            while heap and heap[0][0] == t:
                _, kind, _, job, data = heapq.heappop(heap)
                self._apply_event(kind, job, data)
            self._cycles()
            instants += 1
            if self._progress is not None and instants % 256 == 0:
                self._progress(t)
        self.recorder.finish(self.now)
        return self

    def _apply_event(self, kind: int, job_id: str, data: int) -> None:
        if kind == _WAKEUP:
            self._wakeups.discard(self.now)
            return
        job = self.jobs[job_id]
        if kind == _SUBMIT:
            self._submit(job)
        elif kind == _RELEASE:
            self._release_batch(job, data)
        elif kind == _FINISH:
            if data == job.version and job.state is JobState.RUNNING:
                self._finish(job)
        elif kind == _CANCEL:
            self._cancel(job)

    # -- the cycle -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        # Renew only the views of jobs that changed since the last cycle.
        for job_id in self._dirty:
            job = self.jobs[job_id]
            if job_id in self.active:
                self.index.put(job.view())
            else:
                self.index.drop(job_id)
        self._dirty.clear()
        return Snapshot(
            now=self.now,
            nodes=self.nodes,
            queues=self.queues,
            config=self.config,
            throttles=dict(self.throttles),
            room=self.room,
            index=self.index,
        )

    def _cycles(self) -> None:
        for _ in range(_MAX_CYCLES_PER_INSTANT):
            decisions = run(self.snapshot(), self.policy)
            self._apply(decisions)
            if decisions.wakeup is not None and decisions.wakeup not in self._wakeups:
                self._wakeups.add(decisions.wakeup)
                self._push(decisions.wakeup, _WAKEUP, "")
            again = decisions.releases or any(
                isinstance(change, ThrottleOff) for change in decisions.throttles
            )
            if not again:
                break

    def _apply(self, decisions: Decisions) -> None:
        now = self.now
        for change in decisions.throttles:
            if isinstance(change, ThrottleOn):
                self.throttles[change.queue] = Throttle(change.queue, change.job, now)
                job = self.jobs[change.job]
                job.throttled_once = True
                job.touch()
                self.recorder.throttle_on(change.queue, change.job)
            else:
                self.throttles.pop(change.queue, None)
                self.recorder.throttle_off(change.queue, change.reason)
        for evict in decisions.evictions:
            self._evict(self.active[evict.job], evict)
        for missed in decisions.preempt_misses:
            job = self.active[missed]
            job.preempt_failed_at = now
            job.touch()
        for nominate in decisions.nominations:
            job = self.active[nominate.job]
            job.nomination = nominate.nomination
            job.touch()
        for start in decisions.starts:
            self._start(self.active[start.job], start.placement, start.grow)
        for hold in decisions.holds:
            job = self.active[hold.job]
            self._set_state(job, JobState.HELD)
            job.hold_reason = hold.reason
            job.hold_since = now
            self.recorder.event("hold", job.spec.id, reason=hold.reason)
        for release in decisions.releases:
            job = self.active[release.job]
            if job.hold_reason == "throttle":
                self.recorder.held_for_throttle(now - job.hold_since)
            job.hold_reason = None
            self._set_state(job, JobState.PENDING)
            self.recorder.event("release", job.spec.id, reason=release.reason)

    # -- transitions -----------------------------------------------------------------------

    def _set_state(self, job: SimJob, state: JobState) -> None:
        if job.state is not state:
            before = job.state
            job.state = check_transition(job.state, state)
            self.recorder.state_changed(job, before)
        job.touch()

    def _submit(self, job: SimJob) -> None:
        spec = job.spec
        job.submitted = True
        self.recorder.event("submit", spec.id)
        invalid = job.submission.invalid
        admission = admit(
            spec, self.queues, self.throttles, self.now, self.nodes, self.config.week_offset
        )
        reason = invalid or admission.reason
        if invalid or admission.state is JobState.REJECTED:
            job.state = JobState.REJECTED
            self.recorder.event("reject", spec.id, reason=reason)
            return
        job.state = admission.state
        self.active[spec.id] = job
        job.touch()
        if job.cancel_requested:
            self.recorder.state_changed(job, None)
            self._cancel(job)
            return
        self.recorder.state_changed(job, None)
        if admission.state is JobState.HELD:
            job.hold_reason = admission.reason
            job.hold_since = self.now
            self.recorder.event("hold", spec.id, reason=admission.reason)

    def _start(self, job: SimJob, placement: tuple[TaskPlacement, ...], grow: bool) -> None:
        if job.state not in (JobState.PENDING, JobState.RUNNING):
            raise IllegalTransition(f"start of {job.spec.id} while {job.state.value}")
        now = self.now
        for task in placement:
            self.room.take(task)
        self.recorder.take(placement)
        job.placement.extend(placement)
        if job.state is JobState.PENDING:
            self._set_state(job, JobState.RUNNING)
            job.nomination = None
            job.preempt_failed_at = None
            if job.first_start is None:
                job.first_start = now
        self.recorder.start(job, placement, grow)
        self._progress_if_whole(job)
        job.touch()

    def _progress_if_whole(self, job: SimJob) -> None:
        """A gang with at least `min_available` tasks runs; resume from what was saved."""
        if job.running_since is None and len(job.placement) >= job.spec.min_available:
            job.running_since = self.now
            job.work_base = job.saved_work
            job.version += 1
            remaining = max((job.spec.duration or 0.0) - job.work_base, 0.0)
            self._push(self.now + remaining, _FINISH, job.spec.id, job.version)
            self.recorder.progressing(job, True)

    def _finish(self, job: SimJob) -> None:
        for task in job.placement:
            self.room.give(task)
        self.recorder.give(job.placement)
        self.recorder.progressing(job, False)
        job.placement = []
        job.running_since = None
        job.work_base = job.spec.duration or 0.0
        job.end = self.now
        self._set_state(job, JobState.SUCCEEDED)
        self.recorder.event("finish", job.spec.id)
        self._retire(job)

    def _retire(self, job: SimJob) -> None:
        if not job.batches:
            self.active.pop(job.spec.id, None)
            job.touch()

    def _evict(self, job: SimJob, evict: Evict) -> None:
        now = self.now
        spec = job.spec
        config = self.config
        if evict.tasks:
            chosen = set(evict.tasks)
            leaving = [t for i, t in enumerate(job.placement) if i in chosen]
            staying = [t for i, t in enumerate(job.placement) if i not in chosen]
        else:
            leaving, staying = list(job.placement), []
        stops = job.running_since is not None and len(staying) < spec.min_available
        ckpt = spec.checkpoint
        emergency = (
            config.emergency_checkpoint and ckpt.on_sigterm and ckpt.cost <= config.grace_period
        )
        delay = ckpt.cost if emergency else config.grace_period
        lost = 0.0
        if stops:
            work = job.work_done(now)
            saved = work if emergency else job.view().saved_at(now)
            held = spec.gpu * len(job.placement) / GPU_MILLI
            lost = held * max(work - saved, 0.0)
            self.recorder.progressing(job, False)
            job.running_since = None
            job.work_base = saved
            job.saved_work = saved
            job.version += 1
        job.lost_gpu_seconds += lost
        if evict.reason is not EvictReason.CANCEL:  # a user's cancel is not a preemption
            job.evictions += 1
            job.last_evicted_at = now
        job.placement = staying
        self._batch_ids += 1
        job.batches[self._batch_ids] = _Batch(now + delay, leaving, emergency and stops)
        self._push(now + delay, _RELEASE, spec.id, self._batch_ids)
        if not staying:
            job.evicted_for = evict.preemptor
            job.evict_reason = evict.reason
            self._set_state(job, JobState.RELEASING)
        job.touch()
        self.recorder.evict(job, evict, leaving, now + delay, lost, cut=stops and bool(staying))

    def _release_batch(self, job: SimJob, batch_id: int) -> None:
        batch = job.batches.pop(batch_id)
        for task in batch.tasks:
            self.room.give(task)
        self.recorder.give(batch.tasks)
        self.recorder.release_room(sum(t.gpu for t in batch.tasks))
        if batch.emergency:
            self.recorder.event("checkpoint", job.spec.id, reason="sigterm")
        job.touch()
        if job.state is JobState.RELEASING and not job.batches:
            job.evicted_for = None
            if job.evict_reason is EvictReason.CANCEL or job.cancel_requested:
                job.end = self.now
                self._set_state(job, JobState.CANCELLED)
                self.recorder.event("cancel", job.spec.id)
            else:
                self._set_state(job, JobState.PENDING)
            job.evict_reason = None
        if job.state in (JobState.SUCCEEDED, JobState.CANCELLED, JobState.FAILED):
            self._retire(job)

    def _cancel(self, job: SimJob) -> None:
        if not job.submitted:  # cancelled before it was submitted: refuse it on arrival
            job.cancel_requested = True
            return
        if job.state in (JobState.PENDING, JobState.HELD):
            job.end = self.now
            self._set_state(job, JobState.CANCELLED)
            self.recorder.event("cancel", job.spec.id, reason="user")
            self._retire(job)
        elif job.state is JobState.RUNNING:
            job.cancel_requested = True
            gpu = job.spec.gpu * len(job.placement)
            self._evict(job, Evict(job.spec.id, EvictReason.CANCEL, None, (), gpu))
        elif job.state is JobState.RELEASING:
            job.cancel_requested = True

    # -- results ---------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        return self.recorder.result()


def simulate(
    scenario: Scenario,
    policy: str | None = None,
    progress: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """Run a scenario (optionally under another policy) and return the §6 document."""
    if policy is not None:
        scenario = scenario.with_policy(policy)
    return Simulator(scenario, progress=progress).run().result()
