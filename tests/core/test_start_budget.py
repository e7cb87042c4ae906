"""`Snapshot.start_budget`: a cycle paced to a binder stops starting jobs below critical once
the budget is spent, in the policy's order, and says so; critical jobs, a gang reached while
budget is left, and a cycle without a budget are not held back."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, decided_starts, job, snapshot
from caldera.core import CALDERA, run


def _singles(count: int, first_submit: float = 0.0) -> list:
    return [job(f"j{i:02d}").submitted(first_submit + i) for i in range(count)]


def test_a_budget_stops_the_starts_in_the_policy_s_order_and_says_the_cycle_was_paced() -> None:
    snap = snapshot(cluster().group("n", count=2), jobs=_singles(10))
    unbounded = run(snap, CALDERA)
    assert len(unbounded.starts) == 10 and not unbounded.paced

    paced = run(replace(snap, start_budget=4), CALDERA)
    assert list(decided_starts(snap, paced)) == ["j00", "j01", "j02", "j03"]
    assert paced.paced
    assert not paced.evictions  # the jobs not reached are not a reason to take anybody's room


def test_a_budget_the_cycle_does_not_reach_changes_nothing() -> None:
    snap = snapshot(cluster().group("n", count=2), jobs=_singles(10))
    roomy = run(replace(snap, start_budget=10), CALDERA)
    assert roomy == run(snap, CALDERA) and not roomy.paced


def test_a_gang_reached_with_budget_left_starts_whole() -> None:
    jobs = [job("one").submitted(0), job("gang").gang(8).submitted(1), job("later").submitted(2)]
    snap = snapshot(cluster().group("n", count=2), jobs=jobs)
    decisions = run(replace(snap, start_budget=2), CALDERA)
    starts = decided_starts(snap, decisions)
    assert list(starts) == ["one", "gang"] and len(starts["gang"]) == 8
    assert decisions.paced  # `later` waits for the next cycle


def test_critical_jobs_start_when_no_budget_is_left() -> None:
    jobs = [*_singles(3), job("serve").critical().submitted(5)]
    snap = snapshot(cluster().group("n", count=1), jobs=jobs)
    decisions = run(replace(snap, start_budget=0), CALDERA)
    assert list(decided_starts(snap, decisions)) == ["serve"]
    assert decisions.paced
