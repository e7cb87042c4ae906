"""Volcano's proportion plugin: what each queue deserves this cycle, its share, its limits.

BASELINES.md `volcano` point 2: a queue's deserved is water-filled — the cluster's capacity is
split by weight among the queues that have jobs, each queue's part capped by what it requests
(running plus pending pods) and by its capability; what a capped queue does not take goes
round again to the others, until nothing is left or nobody can take more. Then it is floored
by the queue's guarantee. share = the largest, over resources, of allocated / deserved.

Configured `deserved` values are not read: the proportion plugin derives deserved from
weights alone (that field belongs to Volcano's capacity plugin, not in this configuration).

Resources are (milli-GPU, millicores, MiB) vectors of floats: water-filling splits them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from caldera.model import Queue, Resources

__all__ = ["EPSILON", "QueueShare", "Vector", "vector", "water_fill"]

Vector = tuple[float, float, float]

EPSILON = 1e-6
"""Slack for float comparisons, in milli-GPU / millicore / MiB: far below one unit."""

_MAX_ROUNDS = 1000


def vector(resources: Resources | None, unset: float = 0.0) -> Vector:
    """A quota as a vector; a dimension at or below zero is unset and reads as `unset`."""
    if resources is None:
        return (unset, unset, unset)
    values = (resources.gpu, resources.cpu, resources.memory)
    return (
        float(values[0]) if values[0] > 0 else unset,
        float(values[1]) if values[1] > 0 else unset,
        float(values[2]) if values[2] > 0 else unset,
    )


def _share(allocated: float, deserved: float) -> float:
    """Volcano's helpers.Share: nothing deserved counts as 0 when nothing is held, else 1."""
    if deserved <= 0:
        return 0.0 if allocated <= 0 else 1.0
    return allocated / deserved


@dataclass
class QueueShare:
    """One queue's proportion attributes for this cycle. `allocated` counts running pods and
    pods placed or pipelined this cycle, not pods being released (as Volcano counts)."""

    queue: Queue
    request: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    allocated: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    deserved: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    @property
    def name(self) -> str:
        return self.queue.name

    @property
    def share(self) -> float:
        a, d = self.allocated, self.deserved
        return max(_share(a[0], d[0]), _share(a[1], d[1]), _share(a[2], d[2]))

    @property
    def overused(self) -> bool:
        """deserved <= allocated in every resource: allocate and reclaim skip the queue."""
        a, d = self.allocated, self.deserved
        return d[0] <= a[0] + EPSILON and d[1] <= a[1] + EPSILON and d[2] <= a[2] + EPSILON

    def allows(self, request: Resources) -> bool:
        """Allocatable: allocated + request <= deserved in every resource."""
        a, d = self.allocated, self.deserved
        return (
            a[0] + request.gpu <= d[0] + EPSILON
            and a[1] + request.cpu <= d[1] + EPSILON
            and a[2] + request.memory <= d[2] + EPSILON
        )

    def add(self, request: Resources, sign: int = 1) -> None:
        self.allocated[0] += sign * request.gpu
        self.allocated[1] += sign * request.cpu
        self.allocated[2] += sign * request.memory


def water_fill(total: Vector, queues: Iterable[QueueShare]) -> None:
    """Set every queue's `deserved` (BASELINES.md `volcano` point 2, proportion plugin)."""
    pool = sorted(queues, key=lambda q: q.name)
    remaining = list(total)
    met: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        weight = sum(max(q.queue.weight, 0) for q in pool if q.name not in met)
        if weight <= 0:
            break
        before = list(remaining)
        increased = [0.0, 0.0, 0.0]
        decreased = [0.0, 0.0, 0.0]
        for q in pool:
            if q.name in met:
                continue
            old = list(q.deserved)
            fraction = max(q.queue.weight, 0) / weight
            capability = vector(q.queue.capability, unset=float("inf"))
            guarantee = vector(q.queue.guarantee)
            grown = [
                min(d + r * fraction, c, want)
                for d, r, c, want in zip(old, before, capability, q.request, strict=True)
            ]
            if all(want <= g + EPSILON for want, g in zip(q.request, grown, strict=True)):
                met.add(q.name)  # it has all it asks for
            elif all(abs(g - o) <= EPSILON for g, o in zip(grown, old, strict=True)):
                met.add(q.name)  # its capability stops it
            q.deserved = [max(g, floor) for g, floor in zip(grown, guarantee, strict=True)]
            for i in range(3):
                change = q.deserved[i] - old[i]
                if change > 0:
                    increased[i] += change
                else:
                    decreased[i] -= change
        remaining = [
            r - up + down for r, up, down in zip(remaining, increased, decreased, strict=True)
        ]
        if all(r <= EPSILON for r in remaining) or all(
            abs(r - b) <= EPSILON for r, b in zip(remaining, before, strict=True)
        ):
            break
