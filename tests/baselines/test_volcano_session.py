"""The sum of a pending group's tasks that `volcano`'s session keeps across cycles
(baselines/volcano/session.py `_tasks_of`) is the plain sum, whatever came and went."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from caldera.baselines.volcano import session


def _job(tasks: int) -> Any:
    return SimpleNamespace(spec=SimpleNamespace(tasks=tasks))


@pytest.mark.parametrize("seed", range(8))
def test_group_tasks_kept_across_changes_equal_the_plain_sum(seed: int) -> None:
    rng = random.Random(seed)
    pool = [_job(rng.randrange(1, 9)) for _ in range(60)]
    groups: dict[str, list[Any]] = {key: [] for key in "abc"}
    for _ in range(400):
        key = rng.choice("abc")
        group = groups[key]
        roll = rng.random()
        if roll < 0.3:
            group.append(rng.choice(pool))  # a job comes, at the end
        elif roll < 0.5 and group:
            del group[: rng.randrange(1, 3)]  # jobs start, from the head
        elif roll < 0.7:
            group.insert(rng.randrange(len(group) + 1), rng.choice(pool))
        elif roll < 0.8 and group:
            del group[rng.randrange(len(group))]
        elif roll < 0.9 and group:
            group[rng.randrange(len(group))] = rng.choice(pool)  # another view of a job
        assert session._tasks_of(("q", 0, key, seed), group) == sum(j.spec.tasks for j in group)
