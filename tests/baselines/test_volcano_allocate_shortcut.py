"""`volcano-seed001`'s allocate knows without placing a pod that a whole-node gang runs out
of room (baselines/volcano/allocate.py `_runs_out_of_room`). Every time it says so, placing
pod by pod agrees (the job places nothing, its shape has failed, it starves), and the
simulations come out the same with the shortcut and without it."""

from __future__ import annotations

from typing import Any

import pytest
from baseline_support import NOW, decide

from builders import ClusterBuilder, JobBuilder, cluster, job, queue
from caldera.baselines.volcano import allocate
from caldera.bench.sim import synthetic_scenario
from caldera.sim import Simulator


def _checked(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Ask the shortcut at every try but place pod by pod anyway, checking that the plain
    loop ends as the shortcut said wherever it said the job runs out of room. The answers
    are returned, as they come."""
    answers: list[bool] = []
    shortcut = allocate._runs_out_of_room
    plain = allocate._allocate_job

    def asked(*args: Any) -> bool:
        answers.append(shortcut(*args))
        return False

    def checked(session: Any, job: Any, failed: set[int]) -> bool:
        asked_before = len(answers)
        mark = session.staged.mark()
        placed = plain(session, job, failed)
        if len(answers) > asked_before and answers[-1]:
            spec = job.spec
            assert not placed and spec.shape in failed
            assert session.staged.mark() == mark and job.id not in session.counted
            assert job in session.starving[(spec.queue, spec.priority)]
        return placed

    monkeypatch.setattr(allocate, "_runs_out_of_room", asked)
    monkeypatch.setattr(allocate, "_allocate_job", checked)
    return answers


def _busy(name: str, node: str) -> JobBuilder:
    return job(name).queue("other").gpus(8).running(since=0).on(node)


def _gang(tasks: int, queue_name: str = "team", least: int | None = None) -> JobBuilder:
    return job("g").queue(queue_name).gang(tasks, gpus=8, min_available=least).submitted(NOW)


# "team" deserves all it asks for; "even" as much as "other" (16 of 24 GPUs against 8 held).
QUEUES = [queue("team").weight(10), queue("other"), queue("even")]


def _nodes(small: int = 0) -> ClusterBuilder:
    """Three 8-GPU nodes, and `small` 4-GPU ones: room for the queues' deserved, none for an
    8-GPU pod."""
    built = cluster().group("n", count=3, gpus=8)
    return built.group("s", count=small, gpus=4) if small else built


CASES: dict[str, tuple[ClusterBuilder, list[JobBuilder], bool]] = {
    # nodes, jobs, whether the shortcut says the gang runs out of room
    "as many free nodes as the gang's minimum: it starts": (
        _nodes(small=4),
        [_busy("b", "n-2"), _gang(4, least=2)],
        False,
    ),
    "one free node short": (_nodes(), [_busy("b", "n-2"), _busy("c", "n-1"), _gang(2)], True),
    "the queue's deserved stops the gang before the room does": (
        _nodes(),
        [_busy("b", "n-2"), _gang(3, "even")],
        False,
    ),
    "no free node at all": (
        _nodes(),
        [_busy(f"b{i}", f"n-{i}") for i in range(3)] + [_gang(4)],
        True,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_runs_out_of_room_only_where_placing_pod_by_pod_does(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, jobs, want = CASES[name]
    answers = _checked(monkeypatch)
    decide("volcano-seed001", nodes, jobs, QUEUES)
    assert answers and answers[0] is want


def _result(jobs: int, nodes: int) -> dict[str, Any]:
    scenario = synthetic_scenario(jobs, nodes=nodes).with_policy("volcano-seed001")
    return Simulator(scenario).run().result()


@pytest.mark.parametrize(("jobs", "nodes"), [(400, 40), (1000, 100)])
def test_a_backlog_of_whole_node_gangs_decides_the_same(jobs: int, nodes: int) -> None:
    with pytest.MonkeyPatch.context() as checking:
        answers = _checked(checking)
        plain = _result(jobs, nodes)
    assert sum(answers) > 10
    assert _result(jobs, nodes) == plain
