"""The kernel every runtime drives: decisions in, the same changes to the same tracked jobs
out, with only the effects on the world left to the runtime.

    cycle ──Decisions──▶ Kernel.apply ──▶ TrackedJob changes (state, tasks, accounting)
                              │
                              └──▶ Effects: make / take / give / launch / signal / stop tasks,
                                   persist a job, record an event

`Kernel.settle` is the other half: a runtime that saw tasks end (processes exited, pods gone,
a simulated finish or release) marks them done and asks the kernel, which applies the pure
`caldera.runtime.lifecycle.outcome`: finish, retry, requeue with the original submit time
resuming from the last checkpoint, fail, cancel, or stop the rest of a broken gang.

What differs between runtimes is only how tasks run and where things are kept:

- the simulator makes tasks that hold room until their `kill_at` (the eviction's release
  time), finishes them at the end of their work, and records the §6 event log;
- the service spawns process groups, signals them (SIGTERM, SIGKILL at `kill_at`), commits
  rows to its database before it acts;
- the Kubernetes controller creates pods and deletes them with the grace period.

`Kernel.keep` undoes an eviction the world refused before it reached the tasks (on
Kubernetes a PodDisruptionBudget's 429): the job is Running again and the runtime re-plans
whoever counted on its room.

Decisions that no longer match a job (its tasks changed since the snapshot) are skipped; an
eviction of a job that is never a victim (critical, protected, conformance-protected) is
refused and counted: the core never asks for one, and the kernel is the last line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from caldera.core import (
    Decisions,
    Evict,
    EvictReason,
    JobIndex,
    JobView,
    Nomination,
    PolicyConfig,
    Room,
    SearchMemo,
    Snapshot,
    TaskPlacement,
    Throttle,
    ThrottleOn,
)
from caldera.core.decisions import release_timing
from caldera.core.estimates import DurationEstimates
from caldera.core.fairshare import DecayedRecord, DecayedUsage
from caldera.model import JobState, Node, Queue, check_transition
from caldera.model.lifecycle import TERMINAL
from caldera.runtime.effects import Effects, EventKind
from caldera.runtime.job import TaskT, TrackedJob, refresh_index
from caldera.runtime.lifecycle import Outcome, TaskEnd, outcome

__all__ = ["Kernel", "KernelStats", "cancel_eviction"]

log = logging.getLogger("caldera.runtime")

JobT = TypeVar("JobT", bound=TrackedJob[Any])


@dataclass
class KernelStats:
    refused_evictions: int = 0  # evictions of jobs that are never victims, refused
    throttle_held_seconds: float = 0.0  # seconds jobs spent Held by a throttle
    memo_hits: int = 0  # victim searches the memo of failed searches saved (core/shortcuts/memo.py)
    quiet_cycles: int = 0  # cycles answered from the last one's record (core/shortcuts/quiet.py)


def cancel_eviction(view: JobView, config: PolicyConfig, now: float) -> Evict:
    """The eviction a user's cancel of a running job means (the same release rule as the
    core's evictions)."""
    delay, saves = release_timing(view.spec, config)
    gpu = sum(t.gpu for t in view.placement)
    return Evict(view.id, EvictReason.CANCEL, None, (), gpu, now + delay, saves)


@dataclass
class Kernel(Generic[JobT, TaskT]):
    """The live jobs of one runtime and the one way decisions and task ends change them.

    `progress_on_start`: a gang makes progress from its start decision (the simulator, the
    service); the Kubernetes controller sets `running_since` itself when the pods run.
    `grace_signals`: leaving tasks hold their room until the end of the grace period (real
    processes and pods may take all of it); False: until the eviction's `release_at` (the
    simulator knows when the emergency checkpoint is written).
    """

    effects: Effects[JobT, TaskT]
    config: PolicyConfig
    jobs: dict[str, JobT] = field(default_factory=dict)
    throttles: dict[str, Throttle] = field(default_factory=dict)
    progress_on_start: bool = True
    grace_signals: bool = True
    stats: KernelStats = field(default_factory=KernelStats)
    stale: set[str] = field(default_factory=set)  # jobs whose view the next snapshot renews
    index: JobIndex = field(default_factory=JobIndex)  # the live jobs' views, kept current
    # Each cycle gets the last one's memo of failed victim searches (core/shortcuts/memo.py); False
    # only to check that the memo changes nothing.
    memoize: bool = True
    memo: SearchMemo | None = None
    # Ask each cycle why pending jobs wait (`Decisions.waiting`); off where nobody reads it.
    explain: bool = True
    # How long finished jobs of each queue and type ran: the expected end of a job that gave
    # no expected_duration (core/estimates.py).
    estimates: DurationEstimates = field(default_factory=DurationEstimates)
    # Each queue's decayed GPU usage, with `config.fair_share_half_life` on (core/fairshare.py).
    decayed_usage: DecayedUsage | None = None

    def usage_to_keep(self, now: float, force: bool = False) -> DecayedRecord | None:
        """The queues' decayed usage (fair share over time) for the runtime to write, when it
        is due (`SAVE_EVERY` since the last) or `force`d (the service's stop); None when
        there is nothing to write. It counts as kept: a failed write is tried again when due
        again, so a restart forgets a little more usage and nothing waits on it."""
        usage = self.decayed_usage
        if usage is None or not (force or usage.due(now)):
            return None
        record = usage.record()
        usage.saved_at = now
        return record

    def _held_gpus(self) -> dict[str, int]:
        return {queue: totals[0] for queue, totals in self.index.usage.items()}

    def snapshot(
        self,
        now: float,
        nodes: tuple[Node, ...],
        queues: Mapping[str, Queue],
        room: Room,
        start_budget: int | None = None,
    ) -> Snapshot:
        """The cycle's input. Only the views of jobs that changed since the last snapshot are
        renewed: with thousands of pending jobs a cycle costs what changed, not what exists.
        The room and the index are shared, not copied: use the snapshot before changing
        anything. `start_budget`: see `Snapshot.start_budget` (the Kubernetes controller's
        pacing)."""
        refresh_index(self.index, self.stale, self.jobs)
        decayed: Mapping[str, float] = {}
        if self.config.fair_share_half_life > 0:
            if self.decayed_usage is None:
                self.decayed_usage = DecayedUsage(self.config.fair_share_half_life)
            self.decayed_usage.advance(now, self._held_gpus())
            decayed = self.decayed_usage.view()
        return Snapshot(
            now=now,
            nodes=nodes,
            queues=queues,
            config=self.config,
            throttles=dict(self.throttles),
            room=room,
            index=self.index,
            memo=self.memo if self.memoize else None,
            explain=self.explain,
            estimates=self.estimates.view(),
            decayed_usage=decayed,
            start_budget=start_budget,
        )

    # -- decisions -------------------------------------------------------------------------

    def apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        """Apply one cycle's decisions in their order: waiting modes, evictions, back-offs,
        nominations, starts, holds, releases."""
        now = snapshot.now
        seen: Mapping[str, JobView] = snapshot.job_index.views
        jobs = self.jobs
        if decisions.memo is not None:
            self.memo = decisions.memo
            self.stats.memo_hits += decisions.memo.hits
            self.stats.quiet_cycles += decisions.memo.replayed
        for change in decisions.throttles:
            if isinstance(change, ThrottleOn):
                self.throttles[change.queue] = Throttle(change.queue, change.job, now)
                job = jobs.get(change.job)
                if job is not None:
                    job.throttled_once = True
                    self.mark(job)
                self.effects.record(
                    EventKind.THROTTLE_ON, job, now, queue=change.queue, large_job=change.job
                )
            else:
                waiting = self.throttles.pop(change.queue, None)
                self.effects.record(
                    EventKind.THROTTLE_OFF,
                    jobs.get(waiting.job) if waiting else None,
                    now,
                    queue=change.queue,
                    reason=change.reason,
                    large_job=waiting.job if waiting else None,
                )
        for evict in decisions.evictions:
            job = jobs.get(evict.job)
            view = seen.get(evict.job)
            if job is None or view is None or job.state is not JobState.RUNNING:
                continue
            if tuple(t.placement for t in job.running) != view.placement:
                continue  # its tasks changed since the snapshot; the next cycle re-plans
            self.evict(job, evict, now)
        for missed in decisions.preempt_misses:
            job = jobs.get(missed)
            if job is not None:  # found no victims: back off
                job.preempt_failed_at = now
                self.mark(job)
        for nominate in decisions.nominations:
            job = jobs.get(nominate.job)
            if job is not None and job.state is JobState.PENDING:
                job.nomination = nominate.nomination
                self.mark(job)
        for start in decisions.starts:
            job = jobs.get(start.job)
            if job is None:
                continue
            expected = JobState.RUNNING if start.grow else JobState.PENDING
            if job.state is expected:
                view = seen.get(start.job)  # this very cycle may have dropped its reservation
                self.start(job, start.placement, start.grow, now, view.nomination if view else None)
        for hold in decisions.holds:
            job = jobs.get(hold.job)
            if job is not None and job.state is JobState.PENDING:
                self.set_state(job, JobState.HELD)
                job.hold_reason = hold.reason
                job.hold_since = now
                self.effects.record(EventKind.HOLD, job, now, reason=hold.reason)
        for release in decisions.releases:
            job = jobs.get(release.job)
            if job is not None and job.state is JobState.HELD:
                held = now - (job.hold_since if job.hold_since is not None else now)
                if job.hold_reason == "throttle":
                    self.stats.throttle_held_seconds += held
                job.hold_reason = None
                job.hold_since = None
                self.set_state(job, JobState.PENDING)
                self.effects.record(
                    EventKind.RELEASE, job, now, reason=release.reason, held=round(held, 3)
                )
        if self.decayed_usage is not None:  # what each queue holds from now on
            refresh_index(self.index, self.stale, self.jobs)
            self.decayed_usage.advance(now, self._held_gpus())

    def start(
        self,
        job: JobT,
        placement: tuple[TaskPlacement, ...],
        grow: bool,
        now: float,
        started_under: Nomination | None = None,
    ) -> bool:
        """Start `placement` for a pending job, or grow a running one. False if refused."""
        attempt = job.attempts if grow else job.attempts + 1
        first_rank = max((t.rank + 1 for t in job.tasks), default=0) if grow else 0
        tasks = self.effects.make_tasks(job, placement, attempt, first_rank, started_under)
        if tasks is None:
            return False
        if not grow:
            job.attempts = attempt
            job.tasks = [t for t in job.tasks if t.leaving]
            job.exit_code = None
        job.tasks.extend(tasks)
        if job.state is JobState.PENDING:
            self.set_state(job, JobState.RUNNING)
            job.nomination = None
            job.preempt_failed_at = None
            job.start_time = now
            if job.first_start is None:
                job.first_start = now
        self.effects.launch(job, tasks, grow, now)
        if (
            self.progress_on_start
            and job.running_since is None
            and len(job.running) >= job.spec.min_available
        ):
            self.begin_progress(job, now)
        self.mark(job)
        return True

    def begin_progress(self, job: JobT, now: float) -> None:
        """The gang runs whole: useful work resumes from what was saved."""
        job.running_since = now
        job.work_base = job.saved_work
        self.effects.progressing(job, sum(t.placement.gpu for t in job.running), now)
        self.mark(job)

    def _end_progress(self, job: JobT, now: float) -> None:
        """The gang's tasks are all done (finished or lost): its work is what it reached."""
        if job.running_since is not None:
            self.effects.progressing(job, -sum(t.placement.gpu for t in job.running), now)
            job.work_base = job.work_done(now)
            job.running_since = None

    def evict(
        self,
        job: JobT,
        evict: Evict,
        now: float,
        grace: float | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> bool:
        """Signal a running job (or some of its tasks) to give way. `grace`: seconds before
        the tasks are killed (default: the policy's grace period). False if refused."""
        spec = job.spec
        # A user's cancel ends any job; a sick GPU moves every job (none can run on it).
        by_user_or_hardware = evict.reason in (EvictReason.CANCEL, EvictReason.HEALTH)
        if not by_user_or_hardware and spec.never_a_victim:
            # DESIGN §3: never, in any runtime. The core never asks; refuse if it ever does.
            self.stats.refused_evictions += 1
            log.error("refused to evict protected job %s (%s)", job.id, evict.reason.value)
            return False
        grace = self.config.grace_period if grace is None else grace
        until = now + grace if self.grace_signals else evict.release_at
        progressing = job.running_since is not None
        leaving = job.begin_leaving(evict.tasks, now, until)
        if not leaving:
            return False
        if progressing and job.running_since is None:  # below min_available: the gang stops
            self.effects.progressing(job, -job.signal_gpu, now)
        if not by_user_or_hardware:  # preemptions count (SLA, cooldown); these do not
            job.evictions += 1
            job.last_evicted_at = now
        self.effects.signal(job, leaving, evict, now, detail or {})
        if not job.running:  # the whole gang leaves
            job.evicted_for = evict.preemptor
            job.evict_reason = evict.reason.value
            job.signalled_at = now
            self.set_state(job, JobState.RELEASING)
        self.mark(job)
        return True

    def keep(self, job: JobT, tasks: Sequence[TaskT], now: float) -> bool:
        """An eviction the world refused (on Kubernetes: a PodDisruptionBudget's 429 from the
        Eviction API): `tasks` were asked to leave but never got the signal, so they run on.
        They stop leaving; a whole gang that was Releasing is Running again, its progress
        resumed from where the signal froze it (the moments between the signal and the
        refusal are not counted — the refusal comes back at once — though the pods never
        stopped). The eviction is not counted as one, but `last_evicted_at` stays, so
        the victim's cooldown steers the next non-critical plans to other victims. The
        runtime re-plans the preemptor (its reservation counted on this room). False when
        none of them can be kept (gone meanwhile, or the job is no longer running)."""
        if job.state not in (JobState.RUNNING, JobState.RELEASING):
            return False
        kept = [t for t in job.tasks if t.leaving and not t.done and any(t is k for k in tasks)]
        if not kept:
            return False
        for task in kept:
            task.leaving = False
            task.kill_at = None
        if job.state is JobState.RELEASING:
            self.set_state(job, JobState.RUNNING)
            job.evicted_for = None
            job.evict_reason = None
            job.signalled_at = None
        job.evictions = max(job.evictions - 1, 0)
        if job.work_at_signal is not None and len(job.running) >= job.spec.min_available:
            job.work_base = job.work_at_signal  # what the signal froze; it never stopped
            job.running_since = now
            job.work_at_signal = None
            job.signal_gpu = 0
            self.effects.progressing(job, sum(t.placement.gpu for t in job.running), now)
        self.mark(job)
        return True

    def cancel(self, job: JobT, now: float) -> bool:
        """A user's cancel: a waiting job ends now, a running one is evicted (reason cancel)
        and ends Cancelled when its tasks are gone. False if it has already ended."""
        if job.state in (JobState.PENDING, JobState.HELD):
            job.end_time = now
            job.nomination = None
            self.set_state(job, JobState.CANCELLED)
            self.effects.record(EventKind.CANCEL, job, now, reason="user")
            self.retire(job)
        elif job.state is JobState.RUNNING:
            job.cancel_requested = True
            self.evict(job, cancel_eviction(job.view(), self.config, now), now)
        elif job.state is JobState.RELEASING:
            job.cancel_requested = True
            self.mark(job)
        else:
            return False
        return True

    # -- tasks ended -----------------------------------------------------------------------

    def settle(self, job: JobT, now: float, lost_tasks: int = 0) -> Outcome:
        """Give back the room of leaving tasks that ended and move the job on as
        `lifecycle.outcome` says. `lost_tasks`: tasks whose node is gone (Kubernetes)."""
        gone = [t for t in job.tasks if t.leaving and t.done]
        if gone:
            self.effects.give(job, gone)
            job.tasks = [t for t in job.tasks if not (t.leaving and t.done)]
            self.mark(job)
        ended = outcome(
            job.state,
            [TaskEnd(t.leaving, t.done, t.exit_code) for t in job.tasks],
            exit_code=job.exit_code,
            cancel_requested=job.cancel_requested,
            cancelled_by_eviction=job.evict_reason == EvictReason.CANCEL.value,
            retries=job.retries,
            max_retries=job.spec.max_retries,
            lost_tasks=lost_tasks,
        )
        what = ended.outcome
        if what is Outcome.REQUEUE_EVICTED:
            self.requeue(job, now, "evicted")
        elif what is Outcome.REQUEUE_LOST:
            self.requeue(job, now, "lost")
        elif what is Outcome.CANCEL and job.state is JobState.RELEASING:
            self.requeue(job, now, "evicted")  # cancelled once its tasks are gone
        elif what is Outcome.STOP_GANG:
            if job.exit_code is None and ended.exit_code is not None:
                job.exit_code = ended.exit_code
            self.stop_gang(job, now)
            self.mark(job)
        elif what is not Outcome.WAIT:
            self.finish(job, what, ended.exit_code, now)
        self.retire(job)
        return what

    def stop_gang(self, job: JobT, now: float) -> None:
        """A gang that cannot run whole (a task failed; on Kubernetes also a pod never bound,
        never ready, or deleted by someone else): the rest of its running tasks are stopped
        (killed at the end of the grace period). Once they are gone, `settle` requeues,
        retries or fails it."""
        stopping = [t for t in job.running if not t.done and t.kill_at is None]
        for task in stopping:
            task.kill_at = now + self.config.grace_period
        if stopping:
            self.effects.stop(job, stopping, now)
            self.mark(job)

    def finish(self, job: JobT, what: Outcome, code: int | None, now: float) -> None:
        """Every running task ended: the job succeeded, failed, is retried or cancelled."""
        self._end_progress(job, now)
        self.effects.give(job, job.running)
        job.tasks = [t for t in job.tasks if t.leaving]
        job.end_time = now
        if what is Outcome.CANCEL:
            self.set_state(job, JobState.CANCELLED)
            self.effects.record(EventKind.CANCEL, job, now, reason="user")
        elif what is Outcome.SUCCEED:
            job.exit_code = 0
            self.estimates.observe(job.spec, job.work_base)
            self.set_state(job, JobState.SUCCEEDED)
            self.effects.record(EventKind.FINISH, job, now, exit_code=0)
        elif what is Outcome.RETRY:
            job.exit_code = code
            job.retries += 1
            job.end_time = None
            self.effects.record(EventKind.FAIL, job, now, exit_code=code, retry=job.retries)
            self.requeue(job, now, "retry")
            return
        else:
            job.exit_code = code
            job.reason = job.reason or f"exited with code {code}"
            self.set_state(job, JobState.FAILED)
            self.effects.record(EventKind.FAIL, job, now, exit_code=code)
        self.mark(job)

    def requeue(self, job: JobT, now: float, why: str) -> float:
        """Back to Pending with the original submit time, resuming from the last checkpoint
        (or Cancelled, when a cancel was asked). `why`: evicted, lost or retry. Tasks still
        leaving (a partial eviction under way) keep their room until they are done. Returns
        the GPU-seconds of work lost."""
        if job.running_since is not None:
            self.effects.progressing(job, -sum(t.placement.gpu for t in job.running), now)
        gone = [t for t in job.tasks if not t.leaving or t.done]
        if gone:
            self.effects.give(job, gone)
            job.tasks = [t for t in job.tasks if t.leaving and not t.done]
        lost = job.rewind_to_checkpoint(now)
        cancelled = job.cancel_requested or job.evict_reason == EvictReason.CANCEL.value
        job.evict_reason = None
        if cancelled:
            job.end_time = now
            self.set_state(job, JobState.CANCELLED)
            self.effects.record(EventKind.CANCEL, job, now, reason="user")
        else:
            self.set_state(job, JobState.PENDING)
            self.effects.record(EventKind.REQUEUE, job, now, reason=why, lost_gpu_seconds=lost)
        self.mark(job)
        return lost

    def retire(self, job: JobT) -> None:
        """A job that ended and holds no task leaves the live set."""
        if job.state in TERMINAL and not job.tasks and self.jobs.pop(job.id, None) is not None:
            self.stale.add(job.id)
            self.effects.retired(job)

    # -- bookkeeping -----------------------------------------------------------------------

    def set_state(self, job: JobT, state: JobState) -> None:
        if job.state is not state:
            job.state = check_transition(job.state, state)
        self.mark(job)

    def mark(self, job: JobT) -> None:
        """Record a change: for the next snapshot, and for the runtime to keep."""
        job.touch()
        self.stale.add(job.id)
        self.effects.persist(job)
