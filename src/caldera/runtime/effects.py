"""What a runtime does to the world, and what it records: the contract between the kernel and
each runtime.

The kernel (`caldera.runtime.kernel`) decides *when* tasks are made, launched, signalled,
stopped and given back; a runtime implements `Effects` to say *how* (simulated room and
events, process groups and database rows, pods). It lives apart from the kernel because it
changes for another reason: a new runtime or a new side effect changes this contract, a new
rule for applying decisions changes the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from caldera.core import Evict, Nomination, TaskPlacement
from caldera.runtime.job import TaskT, TrackedJob

__all__ = ["Effects", "EventKind"]

JobC = TypeVar("JobC", bound=TrackedJob[Any], contravariant=True)


class EventKind(StrEnum):
    """What the kernel reports to a runtime's record (the §6 event kinds, and `requeue`)."""

    SUBMIT = "submit"
    REJECT = "reject"
    HOLD = "hold"
    RELEASE = "release"
    START = "start"
    EVICT = "evict"
    CHECKPOINT = "checkpoint"
    REQUEUE = "requeue"
    FINISH = "finish"
    FAIL = "fail"
    CANCEL = "cancel"
    THROTTLE_ON = "throttle_on"
    THROTTLE_OFF = "throttle_off"


class Effects(Protocol[JobC, TaskT]):
    """What a runtime does to the world; the kernel decides when."""

    def make_tasks(
        self,
        job: JobC,
        placement: tuple[TaskPlacement, ...],
        attempt: int,
        first_rank: int,
        started_under: Nomination | None,
    ) -> list[TaskT] | None:
        """The task objects of a start, their room taken (nothing runs yet). None: this
        start cannot be made (room already taken, or the runtime failed the job and said
        why); nothing was taken. `started_under`: the reservation it starts in, as the
        cycle saw it (for audits)."""

    def give(self, job: JobC, tasks: Sequence[TaskT]) -> None:
        """Give the room of tasks that are gone back."""

    def launch(self, job: JobC, tasks: Sequence[TaskT], grow: bool, now: float) -> None:
        """Run the tasks of a start (spawn processes, create pods, schedule the finish)."""

    def signal(
        self, job: JobC, tasks: Sequence[TaskT], evict: Evict, now: float, detail: Mapping[str, Any]
    ) -> None:
        """Ask leaving tasks to go (SIGTERM, delete with the grace period, schedule the
        release); their room stays taken until they are done. `detail`: the runtime's own
        words about why (a sick GPU)."""

    def stop(self, job: JobC, tasks: Sequence[TaskT], now: float) -> None:
        """Stop the rest of a gang that cannot run whole (their `kill_at` is set)."""

    def progressing(self, job: JobC, gpu: int, now: float) -> None:
        """The milli-GPUs of gangs making progress change by `gpu` (a gang starts running
        whole: +, stops: −)."""

    def persist(self, job: JobC) -> None:
        """The job changed: keep it (a row, a record annotation) before acting on it."""

    def record(self, kind: EventKind, job: JobC | None, now: float, **data: Any) -> None:
        """An event for the runtime's history (the simulator's log, the service's table)."""

    def retired(self, job: JobC) -> None:
        """The job ended and holds nothing: it left the live set (clean up what it left)."""
