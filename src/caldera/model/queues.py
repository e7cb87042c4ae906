"""Team queues: weight, deserved / guarantee / capability quotas, state and time windows."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from caldera.model.resources import Resources

__all__ = ["WEEK", "Queue", "QueueState", "TimeWindow"]

DAY = 86_400
WEEK = 7 * DAY


class QueueState(StrEnum):
    OPEN = "Open"
    CLOSING = "Closing"  # no new submissions; what it holds still schedules
    CLOSED = "Closed"  # no new submissions; pending jobs wait, running jobs continue


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Days of the week (1 = Monday … 7 = Sunday) and an hour range [start, end) in UTC.

    An hour range whose end is not after its start wraps past midnight (22–6 is a night).
    """

    days: frozenset[int] = frozenset(range(1, 8))
    start_hour: float = 0
    end_hour: float = 24

    def contains(self, t: float) -> bool:
        """Is time `t` (seconds since a Monday 00:00 UTC) inside the window?"""
        day = int(t // DAY) % 7 + 1
        hour = (t % DAY) / 3600
        if self.start_hour < self.end_hour:
            return day in self.days and self.start_hour <= hour < self.end_hour
        # Overnight: the part before midnight belongs to `day`, the rest to the day before.
        if hour >= self.start_hour:
            return day in self.days
        previous = (day - 2) % 7 + 1
        return hour < self.end_hour and previous in self.days

    def next_edge(self, t: float) -> float:
        """The first time after `t` at which `contains` changes (within a week)."""
        inside = self.contains(t)
        # Edges fall on whole or fractional hours; step to each candidate hour edge.
        base = t - (t % DAY)
        candidates: list[float] = []
        for day_offset in range(0, 8):
            for hour in (self.start_hour, self.end_hour):
                edge = base + day_offset * DAY + hour * 3600
                if edge > t:
                    candidates.append(edge)
        for edge in sorted(candidates):
            if self.contains(edge) != inside:
                return edge
        return t + WEEK


@dataclass(frozen=True, slots=True)
class Queue:
    """A team's queue. Quotas are per resource; a zero dimension means "not set" — except a
    `deserved` quota's GPUs: a queue without `deserved` deserves its weight's share of the
    cluster's GPUs, one with `deserved` exactly its `gpu` value, 0 included."""

    name: str
    weight: int = 1
    deserved: Resources | None = None
    guarantee: Resources | None = None
    capability: Resources | None = None
    reclaimable: bool = True
    state: QueueState = QueueState.OPEN
    time_windows: tuple[TimeWindow, ...] = ()
    critical_allowed: bool = True  # may jobs of type `critical` be submitted here at all?
    # N >= 2: a single-task job asking for one whole GPU runs as one of N tasks sharing that
    # GPU in time, with no memory isolation (seed 004: development queues). 0: off.
    time_sharing: int = 0

    def in_window(self, t: float) -> bool:
        return not self.time_windows or any(w.contains(t) for w in self.time_windows)

    def next_window_edge(self, t: float) -> float | None:
        if not self.time_windows:
            return None
        return min(w.next_edge(t) for w in self.time_windows)
