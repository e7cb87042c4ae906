"""`sorted_by_rank` reuses a sorted backlog only for the very same job views in the same order:
any other list is sorted afresh, and the caller may change what it gets."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any, cast

from caldera.baselines.common import sorted_by_rank
from caldera.core.snapshot import JobView


def _jobs(count: int, seed: int) -> list[JobView]:
    rng = random.Random(seed)
    return [
        cast(
            Any,
            SimpleNamespace(spec=SimpleNamespace(rank=(-rng.randint(0, 2), rng.random(), f"j{i}"))),
        )
        for i in range(count)
    ]


def _plain(jobs: list[JobView], reverse: bool = False) -> list[JobView]:
    return sorted(jobs, key=lambda job: job.spec.rank, reverse=reverse)


def test_the_same_views_get_the_same_order_and_others_their_own() -> None:
    first = _jobs(40, 1)
    got = sorted_by_rank("test", first)
    assert got == _plain(first)
    got.pop()  # the caller's own list: popping leaves the kept order alone
    again = sorted_by_rank("test", list(first))
    assert again == _plain(first)
    shuffled = list(first)
    random.Random(2).shuffle(shuffled)
    assert sorted_by_rank("test", shuffled) == _plain(shuffled)
    other = _jobs(40, 3)  # as many jobs, other views
    assert sorted_by_rank("test", other) == _plain(other)
    assert sorted_by_rank("test", other, reverse=True) == _plain(other, reverse=True)
    fewer = other[:-1]
    assert sorted_by_rank("test", fewer) == _plain(fewer)
