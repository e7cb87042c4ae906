"""Volcano's proportion plugin (BASELINES.md `volcano` point 2): water-filled deserved, share,
overused and allocatable. GPU quantities are whole GPUs here; the plugin counts milli-GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from caldera.baselines.proportion import QueueShare, water_fill
from caldera.model import Queue, Resources

G = 1000.0  # one GPU in milli


@dataclass(frozen=True)
class Q:
    name: str
    weight: int = 1
    request: float = 0.0  # GPUs
    capability: float = 0.0  # GPUs, 0 = unset
    guarantee: float = 0.0


@dataclass(frozen=True)
class Case:
    name: str
    total: float  # GPUs
    queues: tuple[Q, ...]
    want: dict[str, float]  # deserved GPUs


def share_of(q: Q) -> QueueShare:
    queue = Queue(
        name=q.name,
        weight=q.weight,
        capability=Resources(gpu=round(q.capability * G)) if q.capability else None,
        guarantee=Resources(gpu=round(q.guarantee * G)) if q.guarantee else None,
    )
    return QueueShare(queue, request=[q.request * G, 0.0, 0.0])


CASES = [
    Case(
        "split by weight when both ask for more",
        64,
        (Q("a", 3, 100), Q("b", 1, 100)),
        {"a": 48, "b": 16},
    ),
    Case(
        "capped by request: what one queue does not ask for goes to the other",
        64,
        (Q("a", 1, 8), Q("b", 1, 100)),
        {"a": 8, "b": 56},
    ),
    Case(
        "capped by capability, the rest goes round again",
        64,
        (Q("a", 1, 100, capability=16), Q("b", 1, 100)),
        {"a": 16, "b": 48},
    ),
    Case(
        "floored by guarantee even when asking for less; the floor comes out of the pool",
        64,
        (Q("a", 1, 4, guarantee=16), Q("b", 1, 100)),
        {"a": 16, "b": 48},
    ),
    Case(
        "nobody asks for everything: deserved is what they ask for",
        64,
        (Q("a", 1, 10), Q("b", 2, 20)),
        {"a": 10, "b": 20},
    ),
    Case(
        "three rounds: two queues capped in turn",
        90,
        (Q("a", 1, 10), Q("b", 1, 25), Q("c", 1, 100)),
        {"a": 10, "b": 25, "c": 55},
    ),
    Case(
        "a weight-0 queue deserves nothing", 64, (Q("a", 0, 50), Q("b", 1, 100)), {"a": 0, "b": 64}
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_water_fill(case: Case) -> None:
    shares = [share_of(q) for q in case.queues]
    water_fill((case.total * G, 0.0, 0.0), shares)
    got = {s.name: round(s.deserved[0] / G, 6) for s in shares}
    assert got == pytest.approx(case.want)


def test_share_is_the_largest_resource_ratio() -> None:
    s = QueueShare(Queue("a"), allocated=[4 * G, 30_000.0, 0.0], deserved=[8 * G, 40_000.0, 0.0])
    assert s.share == pytest.approx(0.75)  # cpu 30/40 beats gpu 4/8


def test_overused_and_allocatable() -> None:
    s = QueueShare(Queue("a"), allocated=[8 * G, 0.0, 0.0], deserved=[8 * G, 0.0, 0.0])
    assert s.overused  # deserved <= allocated in every resource
    assert not s.allows(Resources(gpu=1000))
    s.add(Resources(gpu=2000), -1)
    assert not s.overused
    assert s.allows(Resources(gpu=2000))
    assert not s.allows(Resources(gpu=3000))
