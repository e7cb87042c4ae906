"""Shape ids (`JobSpec.shape`): equal shapes share one id, different shapes never do, and the
table behind them stays bounded however many shapes a long-running service sees."""

from __future__ import annotations

from functools import lru_cache

import pytest

from caldera.model import JobSpec, JobType
from caldera.model import jobs as model_jobs


def _spec(name: str, cpu: int, gpu: int = 1000) -> JobSpec:
    return JobSpec(id=name, name=name, queue="q", type=JobType.NORMAL, submit=0.0, gpu=gpu, cpu=cpu)


def test_equal_shapes_share_an_id_and_other_shapes_do_not() -> None:
    first, same, other = _spec("a", 500), _spec("b", 500), _spec("c", 501)
    assert first.shape == same.shape
    assert first.shape != other.shape
    assert _spec("d", 500, gpu=2000).shape not in {first.shape, other.shape}


def test_the_table_of_shapes_is_bounded() -> None:
    assert model_jobs._shape_id.cache_info().maxsize == 1 << 16


def test_past_the_bound_no_id_is_given_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same interning with a bound of 4, so that it is passed quickly; a table of its own,
    # so that no other test's shapes are forgotten.
    small = lru_cache(maxsize=4)(model_jobs._shape_id.__wrapped__)
    monkeypatch.setattr(model_jobs, "_shape_id", small)
    ids = [_spec(f"j{i}", 7_000 + i).shape for i in range(10)]
    assert len(set(ids)) == 10
    assert small.cache_info().currsize == 4
    assert _spec("recent", 7_009).shape == ids[-1]  # the most recent shapes are kept
    forgotten = _spec("old", 7_000).shape  # the oldest was forgotten: a new id, no one's
    assert forgotten not in ids
