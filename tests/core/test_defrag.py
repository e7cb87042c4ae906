"""`pack_with_victims` (core/defrag.py): a critical job that would open a leaf on free room
takes a lossless victim on the leaf holding critical work instead, else the free room."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from builders import JobBuilder, cluster, decided_starts, job, queue, snapshot
from caldera.core import CALDERA, PolicyConfig, run


@dataclass(frozen=True)
class Case:
    name: str
    lossless: bool  # research victims write an emergency checkpoint
    on: bool
    want_evicted: tuple[str, ...]
    want_starts: dict[str, tuple[tuple[str, tuple[int, ...], int], ...]]


def jobs(lossless: bool) -> list[JobBuilder]:
    """Leaf 0 (n-0, n-1) full: critical c1 and research r1 on n-0, research r2 on n-1.
    Leaf 1 (n-2, n-3): 4 GPUs of research on n-2. c2 (critical, 4 GPUs) waits."""

    def research(name: str, gpus: int) -> JobBuilder:
        built = job(name).queue("research").gpus(gpus)
        return built.checkpoint(cost=30.0) if lossless else built.no_emergency_checkpoint()

    return [
        job("c1").critical().queue("serving").gpus(4).running().on("n-0", devices=(0, 1, 2, 3)),
        research("r1", 4).running(work=600.0).on("n-0", devices=(4, 5, 6, 7)),
        research("r2", 8).running(since=5.0, work=595.0).on("n-1"),
        research("r3", 4).running(work=600.0).on("n-2", devices=(0, 1, 2, 3)),
        job("c2").critical().queue("serving").gpus(4).submitted(600.0),
    ]


FREE_ROOM = {"c2": (("n-2", (4, 5, 6, 7), 1000),)}
CASES = [
    Case(
        "lossless victims on the critical leaf: one is evicted, c2 waits for it",
        True,
        True,
        ("r2",),
        {},
    ),
    Case("victims that would lose work: c2 takes the free room", False, True, (), FREE_ROOM),
    Case("off: c2 takes the free room", True, False, (), FREE_ROOM),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pack_with_victims(case: Case) -> None:
    nodes = cluster().group("n", count=4, gpus=8, per_tier1=2)
    queues = [queue("serving").deserved(gpu=16), queue("research").deserved(gpu=0)]
    snap = snapshot(
        nodes,
        queues=queues,
        jobs=jobs(case.lossless),
        now=600.0,
        config=PolicyConfig(pack_with_victims=case.on),
    )
    before = snap.free_room.fingerprint()
    decisions = run(snap, CALDERA)
    assert tuple(e.job for e in decisions.evictions) == case.want_evicted
    assert decided_starts(snap, decisions) == case.want_starts
    assert snap.free_room.fingerprint() == before  # decided on a working copy


def test_off_by_default() -> None:
    assert not PolicyConfig().pack_with_victims


@pytest.mark.parametrize(
    ("capped", "on", "want_node"),
    [(True, True, "n-1"), (True, False, "n-2"), (False, True, "n-2")],
    ids=["capped queue, on: beside critical work", "off: binpacking", "a queue that borrows"],
)
def test_work_no_queue_may_reclaim_packs_beside_critical_work(
    capped: bool, on: bool, want_node: str
) -> None:
    """A debug session of a queue capped at its deserved share (never reclaimed) goes to the
    leaf holding critical work (n-1 has room) rather than the fullest node (n-2, leaf 1)."""
    nodes = cluster().group("n", count=4, gpus=8, per_tier1=2)
    dev = queue("dev").deserved(gpu=8)
    queues = [queue("serving").deserved(gpu=16), dev.capability(gpu=8) if capped else dev]
    running = [
        job("c1").critical().queue("serving").gpus(8).running().on("n-0"),
        job("r3").queue("research").gpus(4).running().on("n-2", devices=(0, 1, 2, 3)),
    ]
    snap = snapshot(
        nodes,
        queues=queues,
        jobs=[*running, job("d").debug().queue("dev").gpus(1)],
        config=PolicyConfig(pack_with_victims=on),
    )
    decisions = run(snap, CALDERA)
    ((node, _, _),) = decided_starts(snap, decisions)["d"]
    assert node == want_node
