"""Volcano's allocate hands a queue's jobs out from its pending groups merged by their heads
(`allocate._Backlog`): in V3's order, every job once, a group whose shape is blocked starving
whole on the way; and the session's kept task counts follow a group changed in place."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from builders import job
from caldera.baselines.volcano import allocate
from caldera.baselines.volcano import session as volcano_session
from caldera.baselines.volcano.session import volcano_job_order
from caldera.core.snapshot import JobView
from caldera.model import JobType


def _backlog(rng: random.Random) -> list[list[JobView]]:
    """A queue's pending groups, as the job index keeps them: one per priority and shape,
    each in rank order."""
    groups: dict[tuple[int, int], list[JobView]] = {}
    for i in range(rng.randint(1, 60)):
        view = (
            job(f"j{i:02d}")
            .queue("q")
            .type(rng.choice([JobType.NORMAL, JobType.LARGE, JobType.DEBUG]))
            .submitted(rng.randint(0, 20))
            .gpus(rng.choice([1, 2, 8]))
            .view()
        )
        groups.setdefault((view.spec.priority, view.spec.shape), []).append(view)
    return [sorted(group, key=lambda v: v.spec.rank) for group in groups.values()]


def _session() -> Any:
    """What a backlog uses of a session: its starving lists, filled by the session's own
    `starve_all`."""
    stub = SimpleNamespace(starving={})
    stub.starve_all = lambda group: volcano_session.Session.starve_all(stub, group)
    return stub


def test_jobs_come_in_v3_order_each_once() -> None:
    rng = random.Random(5)
    for _ in range(50):
        groups = _backlog(rng)
        session = _session()
        backlog = allocate._Backlog(session, groups, [])
        handed: list[JobView] = []
        while (chosen := backlog.next_job(set(), set())) is not None:
            handed.append(chosen)
        every = [view for group in groups for view in group]
        assert handed == sorted(every, key=lambda v: volcano_job_order(session, v))
        assert backlog.left == 0 and session.starving == {}


def test_a_blocked_shape_starves_whole_and_the_rest_come_in_order() -> None:
    rng = random.Random(6)
    for _ in range(50):
        groups = _backlog(rng)
        session = _session()
        backlog = allocate._Backlog(session, groups, [])
        every = sorted(
            (view for group in groups for view in group),
            key=lambda v: volcano_job_order(session, v),
        )
        failed: set[int] = set()
        handed: list[JobView] = []
        # Walk as allocate does: a job's shape may fail on its try, blocking the rest.
        while (chosen := backlog.next_job(failed, set())) is not None:
            assert chosen.spec.shape not in failed  # never of a shape blocked by then
            handed.append(chosen)
            if rng.random() < 0.3:
                failed.add(chosen.spec.shape)
        starved = [view for views in session.starving.values() for view in views]
        assert sorted(v.id for v in handed + starved) == sorted(v.id for v in every)
        # What was handed out is in order; what starved is the rest, of blocked shapes,
        # keyed by its queue and priority.
        assert handed == [v for v in every if v in handed]
        for (queue, priority), views in session.starving.items():
            assert all(v.spec.queue == queue and v.spec.priority == priority for v in views)
            assert all(v.spec.shape in failed for v in views)
        assert backlog.left == 0


def test_starve_rest_leaves_nothing() -> None:
    groups = _backlog(random.Random(7))
    session = _session()
    backlog = allocate._Backlog(session, groups, [])
    first = backlog.next_job(set(), set())
    backlog.starve_rest()
    starved = [view for views in session.starving.values() for view in views]
    assert first is not None and first not in starved
    assert len(starved) == sum(map(len, groups)) - 1 and backlog.left == 0
    assert backlog.next_job(set(), set()) is None


def test_group_task_counts_follow_a_group_changed_in_place() -> None:
    one = job("a").gang(4).view()
    two = job("b").gang(2).view()
    key = ("test-group", 0, -1)
    group = [one, two]
    assert volcano_session._tasks_of(key, group) == 6
    assert volcano_session._tasks_of(key, group) == 6  # kept
    group[1] = job("c").gang(3).view()  # the index replaces a view in the same list
    assert volcano_session._tasks_of(key, group) == 7
    group.append(job("d").gang(5).view())
    assert volcano_session._tasks_of(key, group) == 12
