"""Expected ends (core/estimates.py) and the ceiling rule that reads them (DESIGN §4.1 as
amended in issue 37): a borrower at the W_eff ceiling is waited for only while it is expected
to end before the preemptor's start SLO runs out — from its expected_duration, else the p90
of the finished jobs of its queue and type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from builders import cluster, decided_evictions, job, queue, snapshot
from caldera.core import CALDERA, PolicyConfig, run
from caldera.core.estimates import (
    MIN_SAMPLES,
    WINDOW,
    DurationEstimates,
    LearnedDurations,
    chance_to_end,
    expected_end,
    slo_deadline,
)
from caldera.model import JobType

HOUR = 3600.0
NOW = 10 * HOUR


def _spec(queue_name: str = "b", kind: str = "normal"):  # type: ignore[no-untyped-def]
    built = job("x").queue(queue_name)
    built = built.large() if kind == "large" else built
    return built.view(cluster().group("n", count=1).build()).spec


def test_no_estimate_before_enough_jobs_finished() -> None:
    estimates = DurationEstimates()
    for seconds in range(1, MIN_SAMPLES):
        estimates.observe(_spec(), float(seconds))
    assert estimates.view() == {}
    estimates.observe(_spec(), 100.0)
    assert ("b", "normal") in estimates.view()


def test_the_estimate_is_the_p90_of_the_last_window_of_finished_jobs() -> None:
    estimates = DurationEstimates()
    for seconds in range(1, 101):  # 1 … 100 s
        estimates.observe(_spec(), float(seconds))
    assert estimates.view()[("b", "normal")] == 91.0  # the value at index int(0.9 · 100)
    for _ in range(WINDOW):  # the old ones leave the window
        estimates.observe(_spec(), 5000.0)
    assert estimates.view()[("b", "normal")] == 5000.0
    # per queue and type
    assert ("b", "large-job") not in estimates.view()
    assert ("a", "normal") not in estimates.view()


def test_a_view_does_not_change_after_it_was_taken() -> None:
    estimates = DurationEstimates()
    for _ in range(MIN_SAMPLES):
        estimates.observe(_spec(), 10.0)
    view = estimates.view()
    estimates.observe(_spec(), 10_000.0)
    assert view[("b", "normal")] == 10.0
    with pytest.raises(TypeError):
        view[("b", "normal")] = 1.0  # type: ignore[index]


def test_expected_end() -> None:
    nodes = cluster().group("n", count=1).build()
    told = job("t").expected(3 * HOUR).running(since=0).on("n-0").view(nodes)
    assert expected_end(told, {}, HOUR) == 3 * HOUR
    assert expected_end(told, {}, 4 * HOUR) == 4 * HOUR  # overdue: any moment now
    silent = job("s").running(since=0).on("n-0").view(nodes)
    assert expected_end(silent, {}, HOUR) == float("inf")
    assert expected_end(silent, {("default", "normal"): 2 * HOUR}, HOUR) == 2 * HOUR


def test_slo_deadline() -> None:
    config = PolicyConfig()
    assert slo_deadline(_spec(kind="large"), config) == 3600.0  # submitted at 0
    debug = job("d").debug().view(cluster().group("n", count=1).build()).spec
    assert slo_deadline(debug, config) is None


@pytest.mark.parametrize(
    ("learned", "want"),
    [
        (NOW + 1800, {}),  # p90 run of b's jobs: 10.5 h — ends in 30 min, inside P's hour
        (NOW + 2 * HOUR, {"old": ("reclaim", "P", ())}),  # ends in 2 h, after P's SLO
        (None, {"old": ("reclaim", "P", ())}),  # nothing learned: nobody can tell
    ],
    ids=["learned-end-inside-slo", "learned-end-after-slo", "nothing-learned"],
)
def test_a_ceiling_borrower_without_expected_duration_uses_the_learned_estimate(
    learned: float | None, want: dict[str, tuple[str, str, tuple[int, ...]]]
) -> None:
    """`old` reports 90 % progress after 10 h (W_eff at the ceiling) but gave no
    expected_duration: its queue's learned p90 decides whether the large P waits for it."""
    jobs = [
        job("old").gpus(8).running(since=0).progress(0.9).queue("b").on("n-0"),
        job("x").gpus(8).running(since=0).protected().queue("a").on("n-1"),
        job("P").large().gpus(8).submitted(NOW).queue("a"),
    ]
    snap = snapshot(
        cluster().group("n", count=2),
        queues=[queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)],
        jobs=jobs,
        now=NOW,
    )
    if learned is not None:
        snap = replace(snap, estimates={("b", JobType.NORMAL.value): learned})
    assert decided_evictions(run(snap, CALDERA)) == want


def _learned(*works: float) -> Mapping[tuple[str, str], float]:
    estimates = DurationEstimates()
    for work in works:
        estimates.observe(_spec(), work)
    return estimates.view()


def test_the_view_keeps_the_finished_work_behind_the_estimate() -> None:
    view = _learned(300.0, 100.0, 200.0, 500.0, 400.0)
    assert isinstance(view, LearnedDurations)
    assert view.finished(("b", "normal")) == (100.0, 200.0, 300.0, 400.0, 500.0)
    assert view.finished(("a", "normal")) == ()
    assert dict(view) == {("b", "normal"): 500.0}


def test_chance_to_end_counts_finished_jobs_that_ran_longer_than_the_job_has() -> None:
    nodes = cluster().group("n", count=1).build()
    silent = job("s").queue("b").running(since=0).on("n-0").view(nodes)  # 1000 s done at now
    now = 1000.0
    # finished: 3 shorter than 1000 s (they say nothing about a job past them), then 6 longer
    view = _learned(10.0, 20.0, 30.0, 1100.0, 1200.0, 1300.0, 1400.0, 5000.0, 9000.0)
    assert chance_to_end(silent, view, now, by=now + 450.0) == 4 / 6  # 1100 … 1400
    assert chance_to_end(silent, view, now, by=now) == 0.0
    assert chance_to_end(silent, view, now, by=now + 10_000.0) == 1.0
    # fewer than MIN_SAMPLES ran that long: nothing tells
    assert chance_to_end(silent, _learned(10.0, 20.0, 1100.0, 1200.0, 1300.0), now, now) is None
    # a plain mapping of estimates carries no finished work
    assert chance_to_end(silent, {("b", "normal"): 1200.0}, now, now + 450.0) is None
    # a job that says how long it runs is not a matter of chance
    told = job("t").queue("b").expected(2000.0).running(since=0).on("n-0").view(nodes)
    assert chance_to_end(told, view, now, now + 450.0) is None
