"""The `burst` generator: seeded, shaped as its docstring says, bad parameters named."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from caldera.model import JobType
from caldera.sim import parse_scenario


def _burst(**params: object):
    document = {"workload": {"generators": [{"kind": "burst", **params}]}}
    return parse_scenario(document, Path.cwd(), "burst")


def test_the_same_parameters_give_the_same_jobs() -> None:
    first = [s.spec for s in _burst(seed=3, jobs=300).submissions]
    again = [s.spec for s in _burst(seed=3, jobs=300).submissions]
    other = [s.spec for s in _burst(seed=4, jobs=300).submissions]
    assert first == again
    assert first != other


def test_a_burst_is_a_backlog_of_mostly_small_jobs_in_four_team_queues() -> None:
    scenario = _burst(seed=7, jobs=4000, nodes=100)
    jobs = [s.spec for s in scenario.submissions]
    assert len(jobs) == 4000
    assert len(scenario.nodes) == 100
    assert sorted(q.name for q in scenario.queues) == ["team-0", "team-1", "team-2", "team-3"]
    # 1,000 a minute: 4,000 arrivals take about four minutes (Poisson: within 10 %).
    assert 216 <= max(job.submit for job in jobs) <= 264
    types = Counter(job.type for job in jobs)
    assert 0.03 < types[JobType.CRITICAL] / 4000 < 0.07
    assert 0.08 < types[JobType.LARGE] / 4000 < 0.12
    one_gpu = sum(1 for job in jobs if job.tasks == 1 and job.gpu == 1000)
    assert one_gpu / 4000 > 0.6
    gangs = [job for job in jobs if job.tasks > 1]
    assert gangs and all(job.gpu == 8000 and job.tasks * 8 <= 64 for job in gangs)
    assert all(job.type is not JobType.CRITICAL or job.gpu <= 2000 for job in jobs)
    assert all(60 <= job.duration <= 48 * 3600 for job in jobs)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"jobs": 0}, "jobs"),
        ({"critical_share": 0.6, "large_share": 0.6}, "must be <= 1"),
        ({"sizes": [1, 2], "size_weights": [1.0]}, "equally long"),
        ({"colour": "red"}, "unknown key"),
    ],
    ids=["no jobs", "shares over one", "weights mismatch", "unknown key"],
)
def test_bad_parameters_are_named(params: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _burst(**params)
