"""The simulator: a virtual clock driving the same cycle, and the same kernel, every runtime
uses (DESIGN §6).

Events at one instant are applied together, then the scheduling loop every runtime drives
(`caldera.runtime.SchedulerLoop`, on the event time) runs the cycle (again, while it releases
held jobs) and the kernel (`caldera.runtime.Kernel`) applies its decisions. Timers the cycle
asks for (grace-period ends, throttle timeouts, cooldowns, window edges) come back as
wake-up events. Nothing reads the wall clock; the same scenario always gives the same result.

The simulator's effects (`_SimEffects`) are what a virtual cluster does: a start schedules
the gang's finish once it runs whole; an eviction schedules the release of the leaving tasks
at the eviction's `release_at`. Because the simulator knows how an eviction ends — the
emergency checkpoint is written when the core says it fits — it settles the victim's work at
the signal (lost work is counted then), where the service and the controller learn it from
the job's reports when its tasks are gone.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from caldera.config import Scenario, Submission
from caldera.core import (
    Decisions,
    Evict,
    Nomination,
    Policy,
    Room,
    Snapshot,
    TaskPlacement,
    admit,
    run,
)
from caldera.model import JobState
from caldera.policies import get_policy
from caldera.runtime import EventKind, Kernel, SchedulerLoop, TrackedJob
from caldera.sim.recorder import Recorder

__all__ = ["EVENT_NAMES", "SimJob", "SimTask", "Simulator", "simulate"]

# Event kinds in the order they apply at one instant: room comes back before anyone asks.
# A cancel at the submit instant applies to the submitted job.
_RELEASE, _FINISH, _SUBMIT, _CANCEL, _WAKEUP = range(5)
EVENT_NAMES = ("release", "finish", "submit", "cancel", "wakeup")
"""The event kinds' names, by their number (for benchmarks that say what woke a cycle)."""


@dataclass
class SimTask:
    """One simulated task: where it runs; `kill_at` is when a leaving task's room is free."""

    rank: int
    placement: TaskPlacement
    leaving: bool = False
    kill_at: float | None = None
    done: bool = False
    exit_code: int | None = None


@dataclass
class _Batch:
    """Tasks one eviction signalled, released together at `at`."""

    job: str
    tasks: list[SimTask]
    emergency: bool  # they write an emergency checkpoint (logged when they release)


@dataclass(kw_only=True)
class SimJob(TrackedJob[SimTask]):
    """A job's simulated state: the kernel's tracked job plus what the event queue needs."""

    submission: Submission
    submitted: bool = False
    version: int = 0  # bumped whenever a scheduled finish no longer holds
    pending: bool = field(default=False, repr=False)  # counted in the recorder's demand


class _SimEffects:
    """What starting and stopping tasks means on the virtual clock."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def make_tasks(
        self,
        job: SimJob,
        placement: tuple[TaskPlacement, ...],
        attempt: int,
        first_rank: int,
        started_under: Nomination | None,
    ) -> list[SimTask] | None:
        room = self.sim.room
        for task in placement:
            room.take(task)  # the core never over-commits; a CapacityError here is a bug
        return [SimTask(first_rank + i, p) for i, p in enumerate(placement)]

    def give(self, job: SimJob, tasks: Sequence[SimTask]) -> None:
        room = self.sim.room
        for task in tasks:
            room.give(task.placement)
        self.sim.recorder.give(t.placement for t in tasks)
        leaving = sum(t.placement.gpu for t in tasks if t.leaving)
        if leaving:
            self.sim.recorder.release_room(leaving)

    def launch(self, job: SimJob, tasks: Sequence[SimTask], grow: bool, now: float) -> None:
        placement = tuple(t.placement for t in tasks)
        self.sim.recorder.take(placement)
        self.sim.recorder.start(job, placement, grow)

    def signal(
        self,
        job: SimJob,
        tasks: Sequence[SimTask],
        evict: Evict,
        now: float,
        detail: Mapping[str, Any],
    ) -> None:
        # The simulator knows now what the victim keeps: all its work when the emergency
        # checkpoint fits (it releases when that is written), else its last periodic one.
        stops = job.work_at_signal is not None  # this eviction took the gang below its minimum
        lost = 0.0
        if stops:
            if evict.checkpoint:
                job.saved_work = max(job.saved_work, job.work_at_signal or 0.0)
            lost = job.rewind_to_checkpoint(now)
        sim = self.sim
        sim._batch_ids += 1
        sim._batches[sim._batch_ids] = _Batch(job.id, list(tasks), evict.checkpoint and stops)
        sim._push(evict.release_at, _RELEASE, job.id, sim._batch_ids)
        sim.recorder.evict(
            job,
            evict,
            [t.placement for t in tasks],
            evict.release_at,
            lost,
            cut=stops and bool(job.running),
        )

    def stop(self, job: SimJob, tasks: Sequence[SimTask], now: float) -> None:
        raise AssertionError("simulated tasks never fail")  # nothing breaks a simulated gang

    def progressing(self, job: SimJob, gpu: int, now: float) -> None:
        sim = self.sim
        sim.recorder.useful += gpu
        job.version += 1  # a finish scheduled before no longer holds
        if gpu > 0:
            remaining = max((job.spec.duration or 0.0) - job.work_base, 0.0)
            sim._push(now + remaining, _FINISH, job.id, job.version)

    def persist(self, job: SimJob) -> None:
        pending = job.state is JobState.PENDING
        if pending != job.pending:  # the demand waiting for room, for the allocation rate
            job.pending = pending
            self.sim.recorder.pending_demand += job.spec.gang_request.gpu * (1 if pending else -1)

    def record(self, kind: EventKind, job: SimJob | None, now: float, **data: Any) -> None:
        recorder = self.sim.recorder
        job_id = job.id if job is not None else None
        if kind is EventKind.THROTTLE_ON:
            recorder.throttle_on(data["queue"], data["large_job"])
        elif kind is EventKind.THROTTLE_OFF:
            recorder.throttle_off(data["queue"], data["reason"])
        elif kind is EventKind.FINISH:
            recorder.event("finish", job_id)
        elif kind in (EventKind.HOLD, EventKind.RELEASE, EventKind.CANCEL):
            recorder.event(kind.value, job_id, reason=data.get("reason"))
        # requeue and fail: not in the §6 event log (a simulated job never fails)

    def retired(self, job: SimJob) -> None:
        pass


class Simulator:
    """Replays one scenario under one policy."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy | None = None,
        progress: Callable[[float], None] | None = None,
        memoize: bool = True,
    ) -> None:
        self.scenario = scenario
        self.config = scenario.config
        self.policy = policy if policy is not None else get_policy(self.config.name)
        self.nodes = scenario.nodes
        self.room = Room(self.nodes)
        self.queues = {q.name: q for q in scenario.queues}
        self.jobs: dict[str, SimJob] = {}
        self.kernel: Kernel[SimJob, SimTask] = Kernel(
            _SimEffects(self), self.config, grace_signals=False, memoize=memoize, explain=False
        )
        self.throttles = self.kernel.throttles
        self.active = self.kernel.jobs  # jobs submitted and not yet over
        self.now = 0.0
        self.loop = SchedulerLoop(lambda: self.now)
        self.recorder = Recorder(self)
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._batch_ids = 0
        self._batches: dict[int, _Batch] = {}
        self._wakeups: set[float] = set()
        self._progress = progress
        for submission in scenario.submissions:
            self._push(submission.spec.submit, _SUBMIT, submission.spec.id)
            self.jobs[submission.spec.id] = SimJob(
                spec=submission.spec, state=JobState.PENDING, submission=submission
            )
            if submission.cancel_at is not None:
                self._push(submission.cancel_at, _CANCEL, submission.spec.id)

    @property
    def memo_hits(self) -> int:
        """Victim searches the memo of failed searches saved (core/shortcuts/memo.py)."""
        return self.kernel.stats.memo_hits

    @property
    def quiet_cycles(self) -> int:
        """Cycles answered from the last one's record without running the phases
        (core/shortcuts/quiet.py)."""
        return self.kernel.stats.quiet_cycles

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
            self._release(job, self._batches.pop(data))
        elif kind == _FINISH:
            if data == job.version and job.state is JobState.RUNNING:
                for task in job.running:  # the gang did its work: every task exits 0
                    task.done, task.exit_code = True, 0
                self.kernel.settle(job, self.now)
        elif kind == _CANCEL:
            if not job.submitted:  # cancelled before it was submitted: refuse it on arrival
                job.cancel_requested = True
            elif job.id in self.active:
                self.kernel.cancel(job, self.now)

    # -- the cycle -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self.kernel.snapshot(self.now, self.nodes, self.queues, self.room)

    def _cycles(self) -> None:
        self.loop.run(self._snapshot_at, self._decide, self._apply, after=self._wake_at)

    def _snapshot_at(self, now: float) -> Snapshot:
        return self.snapshot()  # `now` is the event time already (the loop's clock)

    def _wake_at(self, decisions: Decisions) -> None:
        """The wake-up a cycle asked for becomes an event (once per instant)."""
        wakeup = decisions.wakeup
        if wakeup is not None and wakeup not in self._wakeups:
            self._wakeups.add(wakeup)
            self._push(wakeup, _WAKEUP, "")

    def _decide(self, snapshot: Snapshot) -> Decisions:
        """One cycle of the core (a benchmark may hand back recorded decisions instead:
        caldera.bench.floor)."""
        return run(snapshot, self.policy)

    def _apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        self.kernel.apply(decisions, snapshot)

    # -- events ----------------------------------------------------------------------------

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
        self.kernel.mark(job)
        if job.cancel_requested:  # the cancel that arrived first applies now
            self.kernel.cancel(job, self.now)
            return
        if admission.state is JobState.HELD:
            job.hold_reason = admission.reason
            job.hold_since = self.now
            self.recorder.event("hold", spec.id, reason=admission.reason)

    def _release(self, job: SimJob, batch: _Batch) -> None:
        """An eviction's tasks are gone: their room is free (after the emergency checkpoint
        when they write one)."""
        for task in batch.tasks:
            task.done = True
        if batch.emergency:
            self.recorder.event("checkpoint", job.id, reason="sigterm")
        self.kernel.settle(job, self.now)

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
