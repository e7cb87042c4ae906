"""Where a simulation's cycles go: how many ran, after what, and what each cost
(`caldera bench sim --breakdown`).

The simulator runs the cycle at every instant something happens (DESIGN §6), so under a
backlog a run's cost is cycles × cost per cycle. Each cycle is classified by
1. what happened at its instant: `submit`, `finish`, `release` (an eviction's room came
   back), `wakeup` (a timer a cycle asked for: a back-off, a grace period, a throttle), several
   of these joined by `+`, or `again` (it ran again at once after releasing held jobs);
2. whether it decided anything — a start, eviction, nomination, hold, release or change of
   waiting mode — or nothing (`idle`: it may still have recorded failed searches and timers);
3. whether the state it saw was unchanged since the previous cycle (the same free room and
   the same running, releasing and nominated work: the search memo's stamp held,
   core/shortcuts/memo.py) — only pending jobs added and time passed.

CPU time is the process time of each `caldera.core.run` call alone: building the snapshot and
applying the decisions are not in it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from caldera.core import Decisions, Snapshot
from caldera.sim.engine import EVENT_NAMES, Simulator

__all__ = ["CycleBreakdown", "ObservedSimulator"]

_Key = tuple[str, bool, bool]  # (trigger, decided something, state unchanged)


@dataclass
class CycleBreakdown:
    """Cycles and their CPU seconds, by (trigger, decided something, state unchanged)."""

    rows: dict[_Key, list[float]] = field(default_factory=dict)

    def add(self, key: _Key, cpu: float) -> None:
        row = self.rows.setdefault(key, [0, 0.0])
        row[0] += 1
        row[1] += cpu

    def as_list(self) -> list[dict[str, Any]]:
        """One entry per class, the costliest first."""
        ordered = sorted(self.rows.items(), key=lambda item: (-item[1][1], item[0]))
        return [
            {
                "trigger": trigger,
                "decided": decided,
                "unchanged": unchanged,
                "cycles": int(count),
                "cpu_s": round(cpu, 3),
                "mean_ms": round(1000 * cpu / count, 3) if count else None,
            }
            for (trigger, decided, unchanged), (count, cpu) in ordered
        ]


def _decided(decisions: Decisions) -> bool:
    return bool(
        decisions.starts
        or decisions.evictions
        or decisions.nominations
        or decisions.holds
        or decisions.releases
        or decisions.throttles
    )


class ObservedSimulator(Simulator):
    """A simulator that classifies and times each of its cycles (the decisions are the same:
    it only watches)."""

    def __init__(self, *args: Any, clock: Callable[[], float] = time.process_time, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.breakdown = CycleBreakdown()
        self._clock = clock
        self._kinds: set[str] = set()
        self._began = 0.0

    def _apply_event(self, kind: int, job_id: str, data: int) -> None:
        self._kinds.add(EVENT_NAMES[kind])
        super()._apply_event(kind, job_id, data)

    def snapshot(self) -> Snapshot:
        snapshot = super().snapshot()
        self._began = self._clock()  # the cycle runs next
        return snapshot

    def _apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        cpu = self._clock() - self._began
        trigger = "+".join(sorted(self._kinds)) or "again"
        self._kinds.clear()
        before, now = snapshot.memo, decisions.memo
        unchanged = before is not None and now is not None and before.stamp.holds_for(now.stamp)
        self.breakdown.add((trigger, _decided(decisions), unchanged), cpu)
        super()._apply(decisions, snapshot)
