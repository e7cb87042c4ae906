"""Team queues: weight, deserved / guarantee / capability quotas, state and time windows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from caldera.model.resources import Resources

__all__ = [
    "WEEK",
    "Queue",
    "QueueState",
    "TimeWindow",
    "departments",
    "deserved_shares",
    "tree_problem",
]

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
    # A department above this queue (DESIGN §2 "Hierarchy"): a queue named as a parent holds
    # no jobs; its quotas bound the sum of its children's. None: a top-level queue.
    parent: str | None = None

    def in_window(self, t: float) -> bool:
        return not self.time_windows or any(w.contains(t) for w in self.time_windows)

    def next_window_edge(self, t: float) -> float | None:
        if not self.time_windows:
            return None
        return min(w.next_edge(t) for w in self.time_windows)


def departments(queues: Iterable[Queue]) -> frozenset[str]:
    """The names of the queues that some queue names as its parent (they hold no jobs)."""
    return frozenset(q.parent for q in queues if q.parent is not None)


def _over(total: Resources, bound: Resources, gpu_always: bool = False) -> str | None:
    """The first resource a bound sets that `total` exceeds (a zero dimension is "not set",
    except a `deserved` quota's GPUs: `gpu_always`)."""
    for name, held, limit in (
        ("gpu", total.gpu, bound.gpu),
        ("cpu", total.cpu, bound.cpu),
        ("memory", total.memory, bound.memory),
    ):
        if (limit > 0 or (gpu_always and name == "gpu")) and held > limit:
            return name
    return None


def tree_problem(queues: Sequence[Queue]) -> str | None:
    """What makes a tree of queues unusable, in one line (None: it is usable). Two levels:
    departments above teams; a department is a top-level queue. A child's quotas live inside
    its parent's: the sum of the children's `guarantee` and of their `deserved` may not exceed
    the parent's when the parent sets one, nor a child's `capability` the parent's."""
    by_name = {q.name: q for q in queues}
    for queue in queues:
        if queue.parent is None:
            continue
        parent = by_name.get(queue.parent)
        if parent is None:
            return f"queue {queue.name!r}: unknown parent {queue.parent!r}"
        if parent.name == queue.name:
            return f"queue {queue.name!r}: a queue cannot be its own parent"
        if parent.parent is not None:
            # A chain a -> b -> a is a cycle; any longer chain is deeper than two levels.
            seen = {queue.name}
            up: Queue | None = parent
            while up is not None and up.parent is not None and up.name not in seen:
                seen.add(up.name)
                up = by_name.get(up.parent)
            if up is not None and up.name in seen:
                return f"queue {queue.name!r}: its parents form a cycle"
            return (
                f"queue {queue.name!r}: parent {parent.name!r} has a parent itself "
                "(two levels: departments above teams)"
            )
        if parent.time_sharing or parent.time_windows:
            return f"queue {parent.name!r}: a department takes no time_sharing or time_windows"
    for name in sorted(departments(queues)):
        parent = by_name[name]
        children = [q for q in queues if q.parent == name]
        for field in ("guarantee", "deserved"):
            bound: Resources | None = getattr(parent, field)
            if bound is None:
                continue
            total = Resources()
            for child in children:
                quota: Resources | None = getattr(child, field)
                if quota is not None:
                    total = total + quota
            over = _over(total, bound, gpu_always=field == "deserved")
            if over is not None:
                return f"queue {name!r}: its children's {field} ({over}) sum above its own"
        if parent.capability is not None:
            for child in children:
                if child.capability is not None and _over(child.capability, parent.capability):
                    return f"queue {child.name!r}: capability above its parent {name!r}'s"
    return None


def deserved_shares(queues: Mapping[str, Queue], capacity_milli: int) -> dict[str, Resources]:
    """What each queue deserves. A queue given only a weight deserves weight / Σ weights of its
    siblings of what its parent deserves — of `capacity_milli` (the cluster's GPUs, MIG slices
    included) for a top-level queue; no CPU or memory share. A queue with a `deserved` quota
    deserves exactly that: an explicit `deserved: {gpu: 0}` is zero, not "unset" (DESIGN §4.1
    step 7). The one place the rule lives: the core, the metrics and the dashboard ask it."""
    weights: dict[str | None, int] = {}
    for queue in queues.values():
        weights[queue.parent] = weights.get(queue.parent, 0) + max(queue.weight, 0)
    result: dict[str, Resources] = {}
    # Departments (top level) first: their children's defaults are shares of theirs.
    for level in (False, True):
        for name, queue in queues.items():
            if (queue.parent is not None) != level:
                continue
            if queue.deserved is not None:
                result[name] = queue.deserved
                continue
            parent = queue.parent
            above = capacity_milli
            if parent is not None and parent in result:
                above = result[parent].gpu
            result[name] = Resources(above * max(queue.weight, 0) // (weights[parent] or 1))
    return result
