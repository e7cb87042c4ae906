"""The one scheduling loop (`caldera.runtime.loop`) and the kernel's stop of a broken gang:
when a cycle is due, how long the loop repeats at one instant, what it hands each runtime."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from builders import job
from caldera.core import (
    Decisions,
    Evict,
    Nomination,
    PolicyConfig,
    Release,
    Snapshot,
    TaskPlacement,
    ThrottleOff,
    ThrottleOn,
)
from caldera.model import JobState
from caldera.runtime import (
    MAX_CYCLES_AT_ONCE,
    TIMER,
    EventKind,
    Kernel,
    Outcome,
    SchedulerLoop,
    TrackedJob,
    run_again,
)
from caldera.sim import Simulator, parse_scenario
from caldera.sim.engine import SimTask as Task

# -- when a cycle is due -------------------------------------------------------------------


@dataclass(frozen=True)
class DueCase:
    name: str
    now: float
    want_due: bool
    needed: bool = False
    gap: float = 0.0
    wakeup: float | None = None
    last_cycle: float = 100.0


DUE = [
    DueCase("nothing changed, inside the timer", 101.0, False),
    DueCase("something changed, no gap", 100.0, True, needed=True),
    DueCase("something changed, inside the gap", 100.4, False, needed=True, gap=0.5),
    DueCase("something changed, the gap is over", 100.5, True, needed=True, gap=0.5),
    DueCase("the wake-up came", 102.0, True, wakeup=102.0),
    DueCase("the wake-up is still ahead", 101.9, False, wakeup=102.0),
    DueCase("the timer ran out", 100.0 + TIMER, True),
    DueCase("never cycled", 0.0, True, last_cycle=-math.inf),
    DueCase("the clock went back, something changed", 50.0, True, needed=True),
]


@pytest.mark.parametrize("case", DUE, ids=[c.name for c in DUE])
def test_a_cycle_is_due(case: DueCase) -> None:
    loop = SchedulerLoop(
        lambda: case.now,
        gap=case.gap,
        needed=case.needed,
        wakeup=case.wakeup,
        last_cycle=case.last_cycle,
    )
    assert loop.due(case.now) is case.want_due


@dataclass(frozen=True)
class WakeCase:
    name: str
    want_next_due: float | None
    want_wake_at: float | None
    needed: bool = False
    wakeup: float | None = None
    last_cycle: float = 100.0


WAKE = [
    WakeCase("the timer", 100.0 + TIMER, 100.0 + TIMER),
    WakeCase("a wake-up before the timer", 101.0, 101.0, wakeup=101.0),
    WakeCase("a needed cycle waits out the gap", 100.0 + TIMER, 100.5, needed=True),
    WakeCase("never cycled, nothing needed", None, None, last_cycle=-math.inf),
    WakeCase("never cycled, a wake-up", 7.0, 7.0, wakeup=7.0, last_cycle=-math.inf),
]


@pytest.mark.parametrize("case", WAKE, ids=[c.name for c in WAKE])
def test_when_the_loop_must_wake(case: WakeCase) -> None:
    loop = SchedulerLoop(
        lambda: 0.0, gap=0.5, needed=case.needed, wakeup=case.wakeup, last_cycle=case.last_cycle
    )
    assert loop.next_due() == case.want_next_due
    assert loop.wake_at() == case.want_wake_at


# -- repeat until quiet --------------------------------------------------------------------

_RELEASE = Decisions(releases=(Release("a", "window"),))
_THROTTLE_OFF = Decisions(throttles=(ThrottleOff("q", "timeout"),))
_THROTTLE_ON = Decisions(throttles=(ThrottleOn("q", "big"),))


@pytest.mark.parametrize(
    ("decisions", "want"),
    [
        (Decisions(), False),
        (_RELEASE, True),
        (_THROTTLE_OFF, True),
        (_THROTTLE_ON, False),
        (Decisions(wakeup=5.0), False),
    ],
    ids=["quiet", "a release", "a throttle ended", "a throttle began", "only a wake-up"],
)
def test_run_again_when_jobs_may_start_now(decisions: Decisions, want: bool) -> None:
    assert run_again(decisions) is want


@dataclass
class Recording:
    """A runtime's side of the loop: what it was asked, in order, and whether the lock was
    held."""

    decided: list[Decisions]
    calls: list[str] = field(default_factory=list)
    locked: bool = False
    snapshots: list[float] = field(default_factory=list)

    def __enter__(self) -> None:
        self.locked = True

    def __exit__(self, *exc: object) -> None:
        self.locked = False

    def snapshot(self, now: float) -> Snapshot:
        assert self.locked
        self.snapshots.append(now)
        self.calls.append("snapshot")
        return cast(Snapshot, now)

    def decide(self, snapshot: Snapshot) -> Decisions:
        assert self.locked
        self.calls.append("decide")
        return self.decided.pop(0) if self.decided else Decisions()

    def apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        assert self.locked
        self.calls.append("apply")

    def after(self, decisions: Decisions) -> None:
        assert not self.locked  # the service spawns outside its lock
        self.calls.append("after")


def test_the_loop_repeats_while_the_cycle_releases_and_records_its_timers() -> None:
    side = Recording([_RELEASE, _THROTTLE_OFF, Decisions(wakeup=42.0)])
    loop = SchedulerLoop(lambda: 10.0, needed=True)
    last = loop.run(side.snapshot, side.decide, side.apply, lock=side, after=side.after)
    assert last == Decisions(wakeup=42.0)
    assert side.calls == ["snapshot", "decide", "apply", "after"] * 3
    assert side.snapshots == [10.0] * 3
    assert (loop.needed, loop.last_cycle, loop.wakeup) == (False, 10.0, 42.0)


def test_the_loop_stops_after_max_cycles_at_one_instant() -> None:
    side = Recording([_RELEASE] * (MAX_CYCLES_AT_ONCE + 5))
    loop = SchedulerLoop(lambda: 0.0)
    loop.run(side.snapshot, side.decide, side.apply, lock=side)
    assert side.calls.count("decide") == MAX_CYCLES_AT_ONCE
    assert len(side.decided) == 5


def test_the_simulator_drives_the_scheduling_loop_on_event_time() -> None:
    scenario = parse_scenario(
        {
            "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 2}]},
            "queues": [{"name": "team"}],
            "jobs": [{"name": "a", "queue": "team", "type": "normal", "submit": 3, "duration": 60}],
        },
        Path.cwd(),
        "loop",
    )
    simulator = Simulator(scenario).run()
    assert isinstance(simulator.loop, SchedulerLoop)
    assert simulator.loop.last_cycle == simulator.now == 63.0


# -- stopping a broken gang ----------------------------------------------------------------


class Effects:
    """Records the kernel's `stop` calls; every other effect does nothing."""

    def __init__(self) -> None:
        self.stopped: list[list[int]] = []

    def make_tasks(
        self,
        job: TrackedJob[Task],
        placement: tuple[TaskPlacement, ...],
        attempt: int,
        first_rank: int,
        started_under: Nomination | None,
    ) -> list[Task] | None:
        return [Task(first_rank + i, p) for i, p in enumerate(placement)]

    def give(self, job: TrackedJob[Task], tasks: Sequence[Task]) -> None:
        pass

    def launch(self, job: TrackedJob[Task], tasks: Sequence[Task], grow: bool, now: float) -> None:
        pass

    def signal(
        self,
        job: TrackedJob[Task],
        tasks: Sequence[Task],
        evict: Evict,
        now: float,
        detail: Mapping[str, Any],
    ) -> None:
        pass

    def stop(self, job: TrackedJob[Task], tasks: Sequence[Task], now: float) -> None:
        self.stopped.append([t.rank for t in tasks])

    def progressing(self, job: TrackedJob[Task], gpu: int, now: float) -> None:
        pass

    def persist(self, job: TrackedJob[Task]) -> None:
        pass

    def record(
        self, kind: EventKind, job: TrackedJob[Task] | None, now: float, **data: Any
    ) -> None:
        pass

    def retired(self, job: TrackedJob[Task]) -> None:
        pass


def _running_gang(kernel: Kernel[TrackedJob[Task], Task]) -> TrackedJob[Task]:
    tracked: TrackedJob[Task] = TrackedJob(
        spec=job("g").gang(3, gpus=1).build(), state=JobState.PENDING
    )
    kernel.jobs[tracked.id] = tracked
    placement = tuple(TaskPlacement(0, (d,), 1000, 0, 0) for d in range(3))
    assert kernel.start(tracked, placement, grow=False, now=0.0)
    return tracked


def test_a_failed_task_stops_the_rest_of_its_gang_once() -> None:
    effects = Effects()
    kernel: Kernel[TrackedJob[Task], Task] = Kernel(effects, PolicyConfig(grace_period=30.0))
    gang = _running_gang(kernel)
    gang.tasks[1].done, gang.tasks[1].exit_code = True, 3
    assert kernel.settle(gang, 10.0) is Outcome.STOP_GANG
    assert effects.stopped == [[0, 2]]
    assert [t.kill_at for t in gang.tasks] == [40.0, None, 40.0]
    assert gang.exit_code == 3
    kernel.stop_gang(gang, 20.0)  # a runtime that sees the gang broken again (Kubernetes)
    assert effects.stopped == [[0, 2]]  # each task is stopped once, at its first deadline
    assert [t.kill_at for t in gang.tasks] == [40.0, None, 40.0]
