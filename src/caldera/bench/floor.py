"""What a simulation costs with a core that costs nothing (`caldera bench sim --floor`).

Around the core the simulator has work of its own: the event queue, the kernel applying each
cycle's decisions, the views and indexes every snapshot hands in, the recorder and the §6
result document. No faster core removes that, so it bounds what any core can reach. To
measure it, the timed run keeps every cycle's decisions (`RecordsDecisions`), and a second run
of the same scenario gets them back, in order, instead of running the core
(`ReplayedSimulator`). The simulator is deterministic, so the same snapshots arrive in the
same order and the replay applies exactly the same decisions; `replay_floor` checks that by
comparing the two result documents, and refuses a replay that does not match.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from caldera.core import Decisions, Snapshot
from caldera.sim import Scenario, Simulator

__all__ = ["RecordsDecisions", "ReplayedSimulator", "replay_floor"]


class RecordsDecisions(Simulator):
    """A simulator that keeps every cycle's decisions, in order (mixed in before another
    simulator class, e.g. the breakdown's, it records that one's cycles)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decided: list[Decisions] = []

    def _decide(self, snapshot: Snapshot) -> Decisions:
        decisions = super()._decide(snapshot)
        if self.decided:
            # The kernel took the last cycle's memo into its next snapshot already; a replay
            # never reads it. Kept, 600,000 of them (the 100k burst) would hold gigabytes.
            object.__setattr__(self.decided[-1], "memo", None)
        self.decided.append(decisions)
        return decisions


class ReplayedSimulator(Simulator):
    """A simulator whose cycles are a recorded run's decisions instead of the core's."""

    def __init__(self, scenario: Scenario, decided: list[Decisions], **kwargs: Any) -> None:
        super().__init__(scenario, **kwargs)
        self._decided: Iterator[Decisions] = iter(decided)

    def _decide(self, snapshot: Snapshot) -> Decisions:
        try:
            return next(self._decided)
        except StopIteration:
            raise ValueError("the replay ran more cycles than the recorded run") from None


def replay_floor(
    scenario: Scenario, decided: list[Decisions], result: dict[str, Any]
) -> tuple[float, float]:
    """Replay `decided` on `scenario` and time it: (wall seconds, CPU seconds) from the first
    event to the finished result document, which must equal the recorded run's `result`."""
    began, cpu_began = time.perf_counter(), time.process_time()
    replayed = ReplayedSimulator(scenario, decided).run().result()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    if replayed != result:
        raise ValueError("the replayed run decided differently from the recorded one")
    return wall, cpu
