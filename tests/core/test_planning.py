"""Planned starts (core/planning.py, DESIGN §4.4): when a starving large job's gang is expected
to fit in its reserved domain, from the running jobs' expected ends — and the waiting reason
that shows it in every runtime."""

from __future__ import annotations

from builders import cluster, job, queue, snapshot
from caldera.core import CALDERA, PolicyConfig, WaitingReasons, run
from caldera.core.snapshot import Snapshot


def _starving(
    now: float = 1600.0, p_expected: float | None = 3600.0, a_expected: float | None = 7200.0
) -> Snapshot:
    """3 × 8 GPUs in one leaf; ops (not reclaimable) runs `a` on n-0 (expected to end at 7200)
    and `p` on n-1; n-2 is free. `big` (2 × 8, submitted 600) starves from 1500."""
    p = job("p").gpus(8).queue("ops").running(since=0).on("n-1")
    if p_expected is not None:
        p = p.expected(p_expected)
    a = job("a").gpus(8).queue("ops").running(since=0).on("n-0")
    if a_expected is not None:
        a = a.expected(a_expected)
    return snapshot(
        cluster().group("n", count=3, gpus=8, per_tier1=3),
        queues=[
            queue("team").deserved(gpu=16),
            queue("ops").deserved(gpu=8).reclaimable(False),
        ],
        jobs=[
            a,
            p,
            job("big").large().gang(2, gpus=8).queue("team").submitted(600),
        ],
        now=now,
        config=PolicyConfig(),
    )


def _reason(snap: Snapshot) -> str:
    decisions = run(snap, CALDERA)
    big = next(j for j in snap.all_jobs if j.id == "big")
    found = WaitingReasons.of(decisions.waiting).reason(big.spec)
    assert found is not None
    return found.detail


def test_the_planned_start_is_the_waiting_reason() -> None:
    # n-2's 8 GPUs now, p's 8 when p is expected to end (3600 = 01:00): 33 min from 1600
    assert _reason(_starving()).startswith("planned on leaf-0 at 01:00 (in 33 min); ")


def test_a_job_that_runs_past_its_expected_end_is_expected_any_moment() -> None:
    assert _reason(_starving(now=4000.0)).startswith("planned on leaf-0 at 01:06 (in 0 min); ")


def test_a_plan_waits_for_the_jobs_whose_end_is_known() -> None:
    # p gave no expected_duration and nothing is learned of ops: a's end (7200 = 02:00) plans
    assert _reason(_starving(p_expected=None)).startswith("planned on leaf-0 at 02:00 (in 93 min)")


def test_no_plan_when_the_ends_it_waits_for_are_unknown() -> None:
    assert "planned on" not in _reason(_starving(p_expected=None, a_expected=None))


def test_no_plan_before_the_job_starves() -> None:
    assert "planned on" not in _reason(_starving(now=1000.0))
