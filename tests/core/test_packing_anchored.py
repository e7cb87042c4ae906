"""`keep_leaves_whole` (core/packing.py): running large gangs anchor their leaf as
never-evicted work does, and both kinds of job pack onto anchored leaves first."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from builders import JobBuilder, cluster, decided_starts, job, snapshot
from caldera.core import CALDERA, PolicyConfig, run

W = 1000


@dataclass(frozen=True)
class Case:
    name: str
    jobs: list[JobBuilder]
    want_on: dict[str, tuple[tuple[str, tuple[int, ...], int], ...]]
    want_off: dict[str, tuple[tuple[str, tuple[int, ...], int], ...]]


def two_leaves() -> list[JobBuilder]:
    """Leaf 0 (n-0, n-1): a large gang on n-0. Leaf 1 (n-2, n-3): 4 GPUs of research on n-2."""
    return [
        job("gang").large().gpus(8).running().on("n-0"),
        job("r1").gpus(4).running().on("n-2", devices=(0, 1, 2, 3)),
    ]


CASES = [
    Case(
        "a critical job goes beside a running large gang, not onto the fullest node",
        [*two_leaves(), job("c").critical().gpus(4)],
        want_on={"c": (("n-1", (0, 1, 2, 3), W),)},
        want_off={"c": (("n-2", (4, 5, 6, 7), W),)},
    ),
    Case(
        "a large gang goes beside another",
        [*two_leaves(), job("g2").large().gpus(4)],
        want_on={"g2": (("n-1", (0, 1, 2, 3), W),)},
        want_off={"g2": (("n-2", (4, 5, 6, 7), W),)},
    ),
    Case(
        "other work binpacks as before",
        [*two_leaves(), job("r2").gpus(4)],
        want_on={"r2": (("n-2", (4, 5, 6, 7), W),)},
        want_off={"r2": (("n-2", (4, 5, 6, 7), W),)},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("keep", [True, False], ids=["on", "off"])
def test_packing(case: Case, keep: bool) -> None:
    nodes = cluster().group("n", count=4, gpus=8, per_tier1=2)
    snap = snapshot(nodes, jobs=case.jobs, config=PolicyConfig(keep_leaves_whole=keep))
    before = snap.free_room.fingerprint()
    decisions = run(snap, CALDERA)
    assert decided_starts(snap, decisions) == (case.want_on if keep else case.want_off)
    assert decisions.evictions == ()
    assert snap.free_room.fingerprint() == before  # decided on a working copy


def test_off_by_default() -> None:
    assert not PolicyConfig().keep_leaves_whole
