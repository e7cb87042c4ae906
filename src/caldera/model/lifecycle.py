"""The job lifecycle: states, and the only moves allowed between them."""

from __future__ import annotations

from enum import StrEnum

from caldera.errors import IllegalTransition

__all__ = ["TERMINAL", "TRANSITIONS", "IllegalTransition", "JobState", "check_transition"]


class JobState(StrEnum):
    HELD = "Held"
    PENDING = "Pending"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    REJECTED = "Rejected"


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # Held: throttled by the queue's waiting mode, or outside the queue's time window.
    JobState.HELD: frozenset(
        {
            JobState.PENDING,  # throttle ended / window opened
            JobState.CANCELLED,  # the user gave up before it was released
        }
    ),
    JobState.PENDING: frozenset(
        {
            JobState.RUNNING,  # a whole gang was placed
            JobState.HELD,  # its queue's window closed before it started
            JobState.CANCELLED,
            JobState.FAILED,  # it can never run (e.g. the queue was deleted)
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.RELEASING,  # evicted: signalled, inside its grace period
            JobState.SUCCEEDED,
            JobState.FAILED,  # exited non-zero with no retries left
            JobState.PENDING,  # failed with retries left, or re-adopted as lost
            JobState.CANCELLED,  # cancelled and already stopped
        }
    ),
    JobState.RELEASING: frozenset(
        {
            JobState.PENDING,  # room released: requeued with its original submit time
            JobState.RUNNING,  # the eviction was refused (a PodDisruptionBudget): it runs on
            JobState.HELD,  # requeued while its queue is outside its window
            JobState.SUCCEEDED,  # it finished inside the grace period
            JobState.CANCELLED,  # the eviction was a cancel
            JobState.FAILED,
        }
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.REJECTED: frozenset(),
}

TERMINAL = frozenset(state for state, nxt in TRANSITIONS.items() if not nxt)


def check_transition(old: JobState, new: JobState) -> JobState:
    """Return `new` if `old -> new` is allowed, otherwise raise IllegalTransition."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"illegal job state change {old.value} -> {new.value}")
    return new
