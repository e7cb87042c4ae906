"""Volcano's proportion plugin (BASELINES.md `volcano` point 2): water-filled deserved, share,
overused and allocatable. GPU quantities are whole GPUs here; the plugin counts milli-GPUs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.baselines.proportion import EPSILON, QueueShare, vector, water_fill
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


def _water_fill_as_written(total: tuple[float, float, float], queues: list[QueueShare]) -> None:
    """water_fill as it was first written (lists, a vector per queue per round): the
    reference its per-resource form must match bit for bit."""
    pool = sorted(queues, key=lambda q: q.name)
    remaining = list(total)
    met: set[str] = set()
    for _ in range(1000):
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
            asks_no_more = all(
                want <= g + EPSILON for want, g in zip(q.request, grown, strict=True)
            )
            if asks_no_more or all(abs(g - o) <= EPSILON for g, o in zip(grown, old, strict=True)):
                met.add(q.name)
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


_amount = st.integers(min_value=0, max_value=10**6)


@settings(max_examples=300, deadline=None)
@given(
    total=st.tuples(_amount, _amount, _amount),
    queues=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5),  # weight
            st.tuples(_amount, _amount, _amount),  # request
            st.tuples(_amount, _amount, _amount),  # capability (0: unset)
            st.tuples(_amount, _amount, _amount),  # guarantee
        ),
        max_size=6,
    ),
)
def test_water_fill_matches_its_first_form(
    total: tuple[int, int, int], queues: list[tuple[int, Any, Any, Any]]
) -> None:
    """Deserved, bit for bit, as the first form computes it, over random pools."""

    def shares() -> list[QueueShare]:
        return [
            QueueShare(
                Queue(
                    name=f"q{i}",
                    weight=weight,
                    capability=Resources(*capability) if any(capability) else None,
                    guarantee=Resources(*guarantee) if any(guarantee) else None,
                ),
                request=[float(v) for v in request],
            )
            for i, (weight, request, capability, guarantee) in enumerate(queues)
        ]

    vector_total = (float(total[0]), float(total[1]), float(total[2]))
    got, want = shares(), shares()
    water_fill(vector_total, got)
    _water_fill_as_written(vector_total, want)
    assert [q.deserved for q in got] == [q.deserved for q in want]
