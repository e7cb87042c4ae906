"""Beyond the seeds (issue 11): a reservation for a starving large job inside its own queue
(DESIGN §4.4) and packing non-evictable work onto as few leaves as possible.

One cycle per case; every case names what it would decide without the mechanism.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from builders import cluster, decided_evictions, decided_starts, job, queue, snapshot
from caldera.core import CALDERA, run
from caldera.model import Node

HOUR = 3600.0
NOW = 10 * HOUR


def two_leaves() -> tuple[Node, ...]:
    """4 nodes × 8 GPUs, leaves {n-0, n-1} and {n-2, n-3}."""
    return cluster().group("n", count=4, gpus=8, per_tier1=2).build()


@pytest.mark.parametrize(
    ("waited", "starts"),
    [
        # 20 min (> 15, a quarter of its SLO): the free half of leaf {n-2, n-3} is reserved
        # for `big`; `later` (prod, large, equal priority) and `res` would take n-3
        (1200.0, set()),
        # 10 min: not starving yet, nothing reserved: `later` starts in the free node
        # (queues by share, then rank: big does not fit)
        (600.0, {"later"}),
    ],
)
def test_a_starving_large_job_keeps_freed_room_against_its_own_queue_and_others(
    waited: float, starts: set[str]
) -> None:
    """`prod` deserves 16 and holds 16 (p0, p1): `big` (2 × 8 in one leaf) cannot take borrowed
    room back; it waits for room to free up."""
    snap = snapshot(
        two_leaves(),
        queues=[queue("prod").deserved(gpu=16), queue("research").deserved(gpu=0)],
        jobs=[
            job("p0").large().gpus(8).queue("prod").running(since=0).on("n-0"),
            job("p1").large().gpus(8).queue("prod").running(since=0).on("n-1"),
            job("r2").gpus(8).queue("research").running(since=0).on("n-2"),
            job("big")
            .large()
            .gang(2, gpus=8)
            .topology(tier=1)
            .queue("prod")
            .submitted(NOW - waited),
            job("later").large().gpus(8).queue("prod").submitted(NOW - 300),
            job("res").gpus(8).queue("research").submitted(NOW - 200),
        ],
        now=NOW,
    )
    decisions = run(snap, CALDERA)
    assert set(decided_starts(snap, decisions)) == starts
    assert decided_evictions(decisions) == {}


def test_a_starving_job_that_fits_starts_before_anybody_else() -> None:
    """n-2 and n-3 are free: `big` takes them ahead of `res`, whose queue's lower share would
    otherwise have it placed first (and then big would not fit)."""
    snap = snapshot(
        two_leaves(),
        queues=[queue("prod").deserved(gpu=8), queue("research").deserved(gpu=24)],
        jobs=[
            job("p0").large().gpus(8).queue("prod").running(since=0).on("n-0"),
            job("p1").large().gpus(8).queue("prod").running(since=0).on("n-1"),
            job("big").large().gang(2, gpus=8).topology(tier=1).queue("prod").submitted(NOW - 1200),
            job("res").gpus(8).queue("research").submitted(NOW - 2000),
        ],
        now=NOW,
    )
    starts = decided_starts(snap, run(snap, CALDERA))
    assert set(starts) == {"big"}
    assert {node for node, _, _ in starts["big"]} == {"n-2", "n-3"}


def test_critical_work_packs_onto_the_leaf_that_already_holds_some() -> None:
    """c0 (critical) runs on n-2. A new critical job fits on every node; binpacking alone
    would put it on n-0 (fullest first, lowest index on ties); packing puts it in n-2's
    leaf, so leaf {n-0, n-1} stays free of work nobody can take."""
    snap = snapshot(
        two_leaves(),
        jobs=[
            job("c0").critical().gpus(4).running(since=0).on("n-2"),
            job("r0").gpus(4).running(since=0).on("n-0"),
            job("c1").critical().gpus(2).submitted(NOW),
        ],
        now=NOW,
    )
    starts = decided_starts(snap, run(snap, CALDERA))
    assert starts["c1"][0][0] in ("n-2", "n-3")


def test_a_critical_preemptor_prefers_victims_in_a_leaf_with_critical_work() -> None:
    """Every node is full. r0 (n-0) is the cheaper victim by effective weight (it started
    later), but r3 sits in the leaf where critical work already runs: c1 takes r3 and opens
    no new leaf to non-evictable work."""
    snap = snapshot(
        two_leaves(),
        jobs=[
            job("r0").gpus(8).running(since=NOW - 600).on("n-0"),
            job("r1").gpus(8).running(since=0).on("n-1"),
            job("c0").critical().gpus(8).running(since=0).on("n-2"),
            job("r3").gpus(8).running(since=0).on("n-3"),
            job("c1").critical().gpus(8).submitted(NOW),
        ],
        now=NOW,
    )
    assert decided_evictions(run(snap, CALDERA)) == {"r3": ("preempt", "c1", ())}


def test_one_leaf_changes_nothing() -> None:
    """Without leaves to choose between, the victims' own order decides: r0, the newest."""
    nodes = cluster().group("n", count=2, gpus=8).build()
    snap = snapshot(
        nodes,
        jobs=[
            job("r0").gpus(8).running(since=NOW - 600).on("n-0"),
            job("r1").gpus(8).running(since=0).on("n-1"),
            job("c1").critical().gpus(8).submitted(NOW),
        ],
        now=NOW,
    )
    assert decided_evictions(run(snap, CALDERA)) == {"r0": ("preempt", "c1", ())}


def test_the_index_keeps_what_derives_from_pinned_work_until_it_changes() -> None:
    """`JobIndex.from_pinned` (the reservation's non-evictable GPUs per domain, kept across
    cycles): the same value while no never-evicted job starts or leaves, rebuilt after."""
    nodes = two_leaves()
    snap = snapshot(nodes, jobs=[job("c0").critical().gpus(8).running(since=0).on("n-0")])
    index = snap.job_index
    builds: list[dict[int, int]] = []

    def total(pinned: Mapping[int, int]) -> dict[int, int]:
        value = dict(pinned)
        builds.append(value)
        return value

    first = index.from_pinned("test", total)
    assert first == {0: 8000}
    assert index.from_pinned("test", total) is first
    index.put(job("c1").critical().gpus(4).running(since=0).on("n-2").view(nodes))
    assert index.from_pinned("test", total) == {0: 8000, 2: 4000}
    index.put(job("n1").gpus(4).running(since=0).on("n-3").view(nodes))  # a possible victim
    assert len(builds) == 2 and index.from_pinned("test", total) is builds[-1]
    index.drop("c0")
    assert index.from_pinned("test", total) == {2: 4000}
    assert len(builds) == 3


def test_a_starving_job_whose_tasks_no_node_can_hold_reserves_nothing() -> None:
    """Found by the liveness property (test_cycle_properties): on 4-GPU nodes a gang of 8-GPU
    tasks never fits, however empty its leaf — yet the leaf's 12 GPUs passed the reservation's
    capacity test, so it reserved all of them and nothing else ever started. Its queue-mate
    `small` starts now (it would not, with that reservation)."""
    snap = snapshot(
        cluster().group("g", count=3, gpus=4, per_tier1=3).build(),
        queues=[queue("q0").deserved(gpu=1)],
        jobs=[
            job("never").large().gang(2, gpus=8, min_available=1).queue("q0").submitted(NOW - 1200),
            job("small").gpus(1).queue("q0").submitted(NOW - 600),
        ],
        now=NOW,
    )
    assert set(decided_starts(snap, run(snap, CALDERA))) == {"small"}
