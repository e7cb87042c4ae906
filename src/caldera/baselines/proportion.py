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


def _name(share: QueueShare) -> str:
    return share.queue.name


_LIMITS: dict[int, tuple[Queue, tuple[str, int, Vector, Vector]]] = {}
_MAX_LIMITS = 1024  # queues whose limits are kept; beyond that, forgotten all at once


def _limits(queue: Queue) -> tuple[str, int, Vector, Vector]:
    """What water-filling reads of a queue's configuration: its name, weight, capability
    (unset: no limit) and guarantee. Worked out once per queue (configurations are
    frozen; a changed queue is another object)."""
    known = _LIMITS.get(id(queue))
    if known is None or known[0] is not queue:
        if len(_LIMITS) >= _MAX_LIMITS:
            _LIMITS.clear()
        limits = (
            queue.name,
            max(queue.weight, 0),
            vector(queue.capability, unset=float("inf")),
            vector(queue.guarantee),
        )
        _LIMITS[id(queue)] = known = (queue, limits)
    return known[1]


def water_fill(total: Vector, queues: Iterable[QueueShare]) -> None:
    """Set every queue's `deserved` (BASELINES.md `volcano` point 2, proportion plugin).

    Runs every cycle, so it is written out per resource, with each queue's weight,
    capability and guarantee read once; the arithmetic is the same, in the same order."""
    pool = [(q, *_limits(q.queue)) for q in sorted(queues, key=_name)]
    r0, r1, r2 = total
    met: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        weight = sum(w for _, name, w, _, _ in pool if name not in met)
        if weight <= 0:
            break
        b0, b1, b2 = r0, r1, r2  # what is left at the start of the round
        up0 = up1 = up2 = down0 = down1 = down2 = 0.0
        for q, name, w, (c0, c1, c2), (f0, f1, f2) in pool:
            if name in met:
                continue
            o0, o1, o2 = q.deserved
            w0, w1, w2 = q.request
            fraction = w / weight
            g0 = min(o0 + b0 * fraction, c0, w0)
            g1 = min(o1 + b1 * fraction, c1, w1)
            g2 = min(o2 + b2 * fraction, c2, w2)
            if w0 <= g0 + EPSILON and w1 <= g1 + EPSILON and w2 <= g2 + EPSILON:
                met.add(name)  # it has all it asks for
            elif abs(g0 - o0) <= EPSILON and abs(g1 - o1) <= EPSILON and abs(g2 - o2) <= EPSILON:
                met.add(name)  # its capability stops it
            d0, d1, d2 = max(g0, f0), max(g1, f1), max(g2, f2)
            q.deserved = [d0, d1, d2]
            change = d0 - o0
            if change > 0:
                up0 += change
            else:
                down0 -= change
            change = d1 - o1
            if change > 0:
                up1 += change
            else:
                down1 -= change
            change = d2 - o2
            if change > 0:
                up2 += change
            else:
                down2 -= change
        r0, r1, r2 = r0 - up0 + down0, r1 - up1 + down1, r2 - up2 + down2
        if (r0 <= EPSILON and r1 <= EPSILON and r2 <= EPSILON) or (
            abs(r0 - b0) <= EPSILON and abs(r1 - b1) <= EPSILON and abs(r2 - b2) <= EPSILON
        ):
            break
