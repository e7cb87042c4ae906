"""Table-driven placement (issue 2): islands, topology, binpack, GPU shares, models, elastic gangs.

Each case is one cycle on a small cluster; `want_starts` is the whole set of starts the cycle
must decide, as {job: ((node, devices, milli per device), …)} — one entry per task, in the
order the cycle placed them. Devices are numbered inside a node; with `island=4` on 8-GPU
nodes, devices 0-3 are island 0 and 4-7 island 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from builders import ClusterBuilder, JobBuilder, cluster, decided_starts, job, snapshot
from caldera.core import CALDERA, run

W = 1000  # milli per device of a whole-GPU task

Spot = tuple[str, tuple[int, ...], int]


@dataclass(frozen=True)
class Case:
    name: str
    nodes: ClusterBuilder
    jobs: list[JobBuilder]
    want_starts: dict[str, tuple[Spot, ...]]
    want_grow: frozenset[str] = field(default_factory=frozenset)


def one_node(gpus: int = 8, island: int = 0, model: str = "H100") -> ClusterBuilder:
    return cluster().group("n", count=1, gpus=gpus, island=island, model=model)


def nodes(count: int, gpus: int = 8, island: int = 0, per_tier1: int = 0) -> ClusterBuilder:
    return cluster().group("n", count=count, gpus=gpus, island=island, per_tier1=per_tier1)


ISLANDS = [
    Case(
        "2-gpu tasks fill one island before opening the other",
        one_node(island=4),
        [job("a").gpus(2), job("b").gpus(2).submitted(1)],
        {"a": (("n-0", (0, 1), W),), "b": (("n-0", (2, 3), W),)},
    ),
    Case(
        "4-gpu task takes the empty island, never 2+2 across islands",
        one_node(island=4),
        [job("run").gpus(2).running().on("n-0", devices=(0, 1)), job("b").gpus(4)],
        {"b": (("n-0", (4, 5, 6, 7), W),)},
    ),
    Case(
        # island 0 has 2 free (2,3), island 1 has 3 free (5,6,7): best fit is island 0
        "2-gpu task best-fits the fuller island",
        one_node(island=4),
        [
            job("x").gpus(2).running().on("n-0", devices=(0, 1)),
            job("y").gpus(1).running().on("n-0", devices=(4,)),
            job("b").gpus(2),
        ],
        {"b": (("n-0", (2, 3), W),)},
    ),
    Case(
        # 4 GPUs are free, but as 2 + 2 in two islands: a 4-GPU task must not straddle
        "4-gpu task refused when the free GPUs are split across islands",
        one_node(island=4),
        [
            job("x").gpus(2).running().on("n-0", devices=(0, 1)),
            job("y").gpus(2).running().on("n-0", devices=(4, 5)),
            job("b").gpus(4),
        ],
        {},
    ),
    Case(
        "8-gpu task takes both islands of an empty node",
        nodes(2, island=4),
        [job("x").gpus(2).running().on("n-0"), job("b").gpus(8)],
        {"b": (("n-1", (0, 1, 2, 3, 4, 5, 6, 7), W),)},
    ),
    Case(
        # islands of 2 on a 4-GPU node: a 2-GPU task never takes one GPU of each
        "2-gpu task stays in an island of 2",
        one_node(gpus=4, island=2),
        [job("x").gpus(1).running().on("n-0", devices=(0,)), job("b").gpus(2)],
        {"b": (("n-0", (2, 3), W),)},
    ),
]

TOPOLOGY = [
    Case(
        # domains {n-0,n-1} and {n-2,n-3}; n-0 and n-2 are busy: the free GPUs are scattered
        "hard tier-1 gang refused when only scattered room is free",
        nodes(4, per_tier1=2),
        [
            job("x").gpus(8).running().on("n-0"),
            job("y").gpus(8).running().on("n-2"),
            # normal, so no preemption: this case is about placement alone
            job("g").gang(2, gpus=8).topology(tier=1, mode="hard"),
        ],
        {},
    ),
    Case(
        "soft tier-1 gang falls back to scattered room",
        nodes(4, per_tier1=2),
        [
            job("x").gpus(8).running().on("n-0"),
            job("y").gpus(8).running().on("n-2"),
            job("g").large().gang(2, gpus=8).topology(tier=1, mode="soft"),
        ],
        {"g": (("n-1", tuple(range(8)), W), ("n-3", tuple(range(8)), W))},
    ),
    Case(
        "hard tier-1 gang fits inside one domain",
        nodes(4, per_tier1=2),
        [
            job("x").gpus(8).running().on("n-0"),
            job("y").gpus(8).running().on("n-1"),
            job("g").large().gang(2, gpus=8).topology(tier=1, mode="hard"),
        ],
        {"g": (("n-2", tuple(range(8)), W), ("n-3", tuple(range(8)), W))},
    ),
    Case(
        # domain {n-0,n-1} has 16 free, domain {n-2,n-3} 12: binpack into the fuller one
        "hard gang picks the fullest domain that fits",
        nodes(4, per_tier1=2),
        [
            job("x").gpus(4).running().on("n-2"),
            job("g").large().gang(2, gpus=4).topology(tier=1, mode="hard"),
        ],
        {"g": (("n-2", (4, 5, 6, 7), W), ("n-3", (0, 1, 2, 3), W))},
    ),
    Case(
        "soft gang prefers one domain when one fits",
        nodes(4, per_tier1=2),
        [
            job("x").gpus(8).running().on("n-0"),
            job("g").large().gang(2, gpus=8).topology(tier=1, mode="soft"),
        ],
        {"g": (("n-2", tuple(range(8)), W), ("n-3", tuple(range(8)), W))},
    ),
    Case(
        # tier-2 domains {n-0..n-3} and {n-4..n-7}; one busy node in the first
        "hard tier-2 gang fits inside one spine",
        cluster().group("n", count=8, gpus=8, per_tier1=2, per_tier2=2),
        [
            job("x").gpus(8).running().on("n-1"),
            job("g").large().gang(4, gpus=8).topology(tier=2, mode="hard"),
        ],
        {"g": tuple((f"n-{i}", tuple(range(8)), W) for i in range(4, 8))},
    ),
]

BINPACK = [
    Case(
        "small job lands on the partly used node, keeping a whole node free",
        nodes(2),
        [job("x").gpus(4).running().on("n-1"), job("s").gpus(2)],
        {"s": (("n-1", (4, 5), W),)},
    ),
    Case(
        "gang without topology fills partly used nodes first",
        nodes(3),
        [job("x").gpus(4).running().on("n-1"), job("g").gang(2, gpus=4)],
        {"g": (("n-1", (4, 5, 6, 7), W), ("n-0", (0, 1, 2, 3), W))},
    ),
    Case(
        "a gang that does not fit whole starts no task at all",
        nodes(3),
        [job("x").gpus(8).running().on("n-0"), job("g").gang(3, gpus=8)],
        {},
    ),
    Case(
        # n-0 has GPUs but not the CPU: the task goes where both fit
        "cpu is part of the fit",
        nodes(2),
        [job("x").gpus(1).cpu(120).running().on("n-0"), job("s").gpus(1).cpu(16)],
        {"s": (("n-1", (0,), W),)},
    ),
]

SHARES = [
    Case(
        "two halves share one device",
        one_node(),
        [job("a").gpus(0.5), job("b").gpus(0.5).submitted(1)],
        {"a": (("n-0", (0,), 500),), "b": (("n-0", (0,), 500),)},
    ),
    Case(
        # device 0 has 700 left, device 1 has 400: 400 is the tightest that fits
        "a share goes to the best-fitting device",
        one_node(),
        [
            job("x").gpus(0.3).running().on("n-0", devices=(0,)),
            job("y").gpus(0.6).running().on("n-0", devices=(1,)),
            job("z").gpus(0.4),
        ],
        {"z": (("n-0", (1,), 400),)},
    ),
    Case(
        "a share never overcommits a device",
        one_node(gpus=1),
        [job("x").gpus(0.7).running().on("n-0"), job("z").gpus(0.4)],
        {},
    ),
    Case(
        "shares go to a partly used node before an empty one",
        nodes(2),
        [job("x").gpus(0.5).running().on("n-1", devices=(3,)), job("z").gpus(0.25)],
        {"z": (("n-1", (3,), 250),)},
    ),
    Case(
        # 0.6 + 0.6 > 1: the second share needs its own device
        "shares that do not fit together take separate devices",
        one_node(gpus=2),
        [job("a").gpus(0.6), job("b").gpus(0.6).submitted(1)],
        {"a": (("n-0", (0,), 600),), "b": (("n-0", (1,), 600),)},
    ),
]

MODELS = [
    Case(
        "a model constraint picks that model's nodes",
        cluster().group("h100", count=1, model="H100").group("a100", count=1, model="A100"),
        [job("x").gpus(8).model("A100")],
        {"x": (("a100-0", tuple(range(8)), W),)},
    ),
    Case(
        "a model constraint waits rather than run on another model",
        cluster().group("h100", count=1, model="H100").group("a100", count=1, model="A100"),
        [job("busy").gpus(8).running().on("a100-0"), job("x").gpus(8).model("A100")],
        {},
    ),
    Case(
        "either of two allowed models",
        cluster().group("h100", count=1, model="H100").group("l40s", count=1, gpus=4, model="L40S"),
        [job("busy").gpus(8).running().on("h100-0"), job("x").gpus(2).model("H100", "L40S")],
        {"x": (("l40s-0", (0, 1), W),)},
    ),
]

ELASTIC = [
    Case(
        # 8 GPUs hold two 4-GPU tasks of the four asked for; min_available 1 is met
        "elastic gang starts with what fits above min_available",
        one_node(),
        [job("e").gang(4, gpus=4, min_available=1)],
        {"e": (("n-0", (0, 1, 2, 3), W), ("n-0", (4, 5, 6, 7), W))},
    ),
    Case(
        "elastic gang waits when fewer than min_available fit",
        one_node(),
        [job("e").gang(4, gpus=4, min_available=3)],
        {},
    ),
    Case(
        # running 1 of 4 tasks; a free node appears: backfill adds the tasks that fit
        "elastic gang grows into free room",
        nodes(2),
        [
            job("e").gang(4, gpus=4, min_available=1).running().on("n-0", devices=(0, 1, 2, 3)),
        ],
        {"e": (("n-0", (4, 5, 6, 7), W), ("n-1", (0, 1, 2, 3), W), ("n-1", (4, 5, 6, 7), W))},
        want_grow=frozenset({"e"}),
    ),
]

CASES = ISLANDS + TOPOLOGY + BINPACK + SHARES + MODELS + ELASTIC


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_placement(case: Case) -> None:
    snap = snapshot(case.nodes, jobs=case.jobs)
    decisions = run(snap, CALDERA)
    assert decided_starts(snap, decisions) == case.want_starts
    assert {s.job for s in decisions.starts if s.grow} == case.want_grow
    assert decisions.evictions == ()


def test_elastic_gang_grows_through_the_simulator() -> None:
    """min_available < tasks: starts with >= min when room is short, grows when it frees."""
    from caldera.sim import parse_scenario, simulate

    result = simulate(
        parse_scenario(
            {
                "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 8}]},
                "queues": [{"name": "q"}],
                "jobs": [
                    {
                        "name": "blocker",
                        "queue": "q",
                        "type": "normal",
                        "submit": 0,
                        "duration": 600,
                        "gpus_per_task": 4,
                    },
                    {
                        "name": "e",
                        "queue": "q",
                        "type": "normal",
                        "submit": 10,
                        "duration": 3600,
                        "tasks": 4,
                        "gpus_per_task": 2,
                        "min_available": 2,
                    },
                ],
            }
        )
    )
    starts = [
        (e["t"], e["tasks"], e.get("grow", False))
        for e in result["events"]
        if e["kind"] == "start" and e["job"] == "e"
    ]
    # 4 GPUs free at t=10: two 2-GPU tasks (= min_available); at t=600 the blocker's 4 GPUs
    # free and the other two tasks join.
    assert starts == [(10.0, 2, False), (600.0, 2, True)]
    assert result["metrics"]["gang_hang_gpu_hours"] == 0
