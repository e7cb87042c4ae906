"""A job's tasks ended: what now? One pure function every runtime asks.

    RELEASING, every leaving task gone         → CANCEL (a user's cancel) or REQUEUE_EVICTED
    RUNNING, no running task left              → REQUEUE_LOST
    RUNNING, every running task ended:
        a cancel was asked                     → CANCEL
        all exit 0, nothing lost, no failure   → SUCCEED
        some vanished unseen, no failure yet   → REQUEUE_LOST (not the job's fault)
        a failure, retries left                → RETRY
        a failure                              → FAIL
    RUNNING, a member failed or vanished while
        others run (or a task's node is gone)  → STOP_GANG (a gang with a dead member cannot
                                                 progress; settled again when they are gone)
    otherwise                                  → WAIT

The runtime reports what it saw (`TaskEnd`: done, exit code; None when nobody saw how it
ended); the kernel (`caldera.runtime.kernel`) carries the outcome out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from caldera.model import JobState

__all__ = ["Ended", "Outcome", "TaskEnd", "outcome"]


class Outcome(StrEnum):
    WAIT = "wait"
    SUCCEED = "succeed"
    FAIL = "fail"
    RETRY = "retry"
    CANCEL = "cancel"
    REQUEUE_EVICTED = "evicted"
    REQUEUE_LOST = "lost"
    STOP_GANG = "stop-gang"


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """One task as the runtime last saw it."""

    leaving: bool
    done: bool
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class Ended:
    """The outcome, and the exit code that decided it (None: none did)."""

    outcome: Outcome
    exit_code: int | None = None


def outcome(
    state: JobState,
    tasks: Sequence[TaskEnd],
    *,
    exit_code: int | None,
    cancel_requested: bool,
    cancelled_by_eviction: bool,
    retries: int,
    max_retries: int,
    lost_tasks: int = 0,
) -> Ended:
    """What happens to a job whose tasks are `tasks` (leaving ones that ended are already
    gone). `exit_code`: the job's recorded failure, if a member failed earlier."""
    if state is JobState.RELEASING:
        if tasks:
            return Ended(Outcome.WAIT)
        if cancel_requested or cancelled_by_eviction:
            return Ended(Outcome.CANCEL)
        return Ended(Outcome.REQUEUE_EVICTED)
    if state is not JobState.RUNNING:
        return Ended(Outcome.WAIT)
    running = [t for t in tasks if not t.leaving]
    if not running:
        return Ended(Outcome.REQUEUE_LOST)
    failed = next((t.exit_code for t in running if t.done and t.exit_code not in (0, None)), None)
    if all(t.done for t in running):
        codes = [t.exit_code for t in running]
        if cancel_requested:
            return Ended(Outcome.CANCEL)
        if not lost_tasks and all(c == 0 for c in codes) and exit_code in (None, 0):
            return Ended(Outcome.SUCCEED, 0)
        if exit_code is None and (lost_tasks or any(c is None for c in codes)):
            return Ended(Outcome.REQUEUE_LOST)
        code = exit_code if exit_code not in (None, 0) else failed
        assert code is not None  # some code is neither 0 nor None
        return Ended(Outcome.RETRY if retries < max_retries else Outcome.FAIL, code)
    if lost_tasks or any(t.done and t.exit_code != 0 for t in running):
        return Ended(Outcome.STOP_GANG, exit_code if exit_code is not None else failed)
    return Ended(Outcome.WAIT)
