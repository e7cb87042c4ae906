"""`reclaim_whole_nodes` (core/eviction.py, issue 37): a gang's reclaim search that finds no
plan searches again among the victims on nodes it could have whole.

Four 8-GPU nodes. `research` (reclaimable, deserves 8) borrows 30 GPUs: `a0` and `a1` (7 GPUs
each, beside a protected 1-GPU job on n-0 and n-1) and `b2`, `b3` (8 GPUs each on n-2, n-3).
All checkpoint on SIGTERM (nothing lost); `a0`, `a1` started last, so they rank first
(DESIGN §4.1 step 3: lowest W_eff, then the most recently started). Reclaim's floor lets
research lose a job while it holds more than 8 GPUs before that eviction. In victim order
a0 (30 -> 23), a1 (-> 16), b2 (-> 8) pass and b3 does not: n-2 alone is cleared and the
large gang (2 × 8 GPUs) has no plan. Searching again among the units on nodes that can be
cleared whole (n-2, n-3) finds b2 (30 -> 22) and b3 (-> 14).
"""

from __future__ import annotations

import pytest

from builders import cluster, decided_evictions, job, queue, snapshot
from caldera.core import CALDERA, PolicyConfig, run

HOUR = 3600.0


def _snapshot(config: PolicyConfig):  # type: ignore[no-untyped-def]
    research = [
        job("b2").queue("research").gpus(8).running(since=0).on("n-2"),
        job("b3").queue("research").gpus(8).running(since=0).on("n-3"),
        job("a0").queue("research").gpus(7).running(since=HOUR).on("n-0"),
        job("a1").queue("research").gpus(7).running(since=HOUR).on("n-1"),
    ]
    pinned = [
        job(f"keep{i}").queue("serving").gpus(1).running(since=0).protected().on(f"n-{i}")
        for i in (0, 1)
    ]
    big = job("big").large().gang(2, gpus=8).queue("prod").submitted(2 * HOUR)
    return snapshot(
        cluster().group("n", count=4),
        queues=[
            queue("prod").deserved(gpu=16),
            queue("serving").deserved(gpu=8),
            queue("research").deserved(gpu=8).reclaimable(),
        ],
        jobs=[*research, *pinned, big],
        now=2 * HOUR,
        config=config,
    )


@pytest.mark.parametrize(
    ("on", "want"),
    [
        (False, {}),
        (True, {"b2": ("reclaim", "big", ()), "b3": ("reclaim", "big", ())}),
    ],
    ids=["off-no-plan", "on-clears-two-nodes"],
)
def test_a_gang_searches_again_on_nodes_it_can_have_whole(
    on: bool, want: dict[str, tuple[str, str, tuple[int, ...]]]
) -> None:
    # The whole budget: both victims signalled in this cycle (30 % of 32 GPUs lets one go).
    config = PolicyConfig(reclaim_whole_nodes=on, eviction_budget=1.0)
    decisions = run(_snapshot(config), CALDERA)
    assert decided_evictions(decisions) == want
    nominated = {n.job: n.nomination for n in decisions.nominations}
    if on:
        assert nominated["big"] is not None and set(nominated["big"].victims) == {"b2", "b3"}
    else:
        assert "big" not in nominated
