"""Table-driven victim selection (issue 3, DESIGN §4.1, §4.2, §4.5): one case per rule.

Each case is one cycle; `want_evictions` is the whole set of evictions it must decide, as
{victim: (reason, preemptor, tasks)} with tasks () meaning the whole job. Unless a case says
otherwise, victims checkpoint on SIGTERM at no cost (so no work is lost and the loss criterion
is a tie), and the cheap victim sits on the higher-numbered node so that "the first node
found" can never pass for the rule under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from builders import (
    ClusterBuilder,
    JobBuilder,
    QueueBuilder,
    cluster,
    decided_evictions,
    job,
    queue,
    snapshot,
)
from caldera.core import CALDERA, PolicyConfig, run
from caldera.core.pools import freed_by
from caldera.core.victims import victim_units

HOUR = 3600.0
NOW = 10 * HOUR

Want = dict[str, tuple[str, str | None, tuple[int, ...]]]


@dataclass(frozen=True)
class Case:
    name: str
    nodes: ClusterBuilder
    jobs: list[JobBuilder]
    want_evictions: Want
    queues: list[QueueBuilder] = field(default_factory=list)
    config: PolicyConfig = field(default_factory=PolicyConfig)
    now: float = NOW
    want_pending_victims: dict[str, tuple[str, ...]] = field(default_factory=dict)


def nodes(count: int, gpus: int = 8, per_tier1: int = 0) -> ClusterBuilder:
    return cluster().group("n", count=count, gpus=gpus, per_tier1=per_tier1)


def normal(name: str, gpus: float = 8, since: float = 0.0) -> JobBuilder:
    return job(name).gpus(gpus).running(since=since)


def preemptor(name: str = "P", gpus: float = 8) -> JobBuilder:
    return job(name).large().gpus(gpus).submitted(NOW)


def preempt(*victims: str, by: str = "P") -> Want:
    return {v: ("preempt", by, ()) for v in victims}


ORDER = [
    Case(
        # same start, same work; `heavy` reports 50 % progress: +600·0.25 = +150 defends it
        "lowest effective weight first",
        nodes(2),
        [
            normal("light").on("n-1"),
            normal("heavy").progress(0.5).on("n-0"),
            preemptor(),
        ],
        preempt("light"),
    ),
    Case(
        # equal weight (same work done); no emergency checkpoint: `fresh` saved 10 min ago
        # (periodic, every 3 h of work → last at 9 h), `stale` never checkpoints: loses 10 h
        "cheapest loss among equal weights",
        nodes(2),
        [
            normal("stale").no_emergency_checkpoint().on("n-0"),
            normal("fresh").no_emergency_checkpoint(interval=3 * HOUR).on("n-1"),
            preemptor(),
        ],
        preempt("fresh"),
    ),
    Case(
        # `young` ran 1 h and cannot checkpoint: evicting it loses 8 GPU-hours, though its
        # W_eff (100 + 100·ln 2 ≈ 169) is lower; `old` ran 10 h (W_eff ≈ 340) and writes an
        # emergency checkpoint: it loses nothing. Lost work orders first (DESIGN §4.1 step 3).
        "least work lost first, whatever the weight",
        nodes(2),
        [
            normal("young", since=NOW - HOUR).no_emergency_checkpoint().on("n-1"),
            normal("old", since=0).on("n-0"),
            preemptor(),
        ],
        preempt("old"),
    ),
    Case(
        "normal preempts debug",
        nodes(1),
        # just started: W_eff = 50 + 100·ln(1) = 50 < 100. (After ~40 min, 50 + 100·ln(1 + h)
        # passes 100 and the debug job defends itself against normal jobs, by design.)
        [
            job("dbg").debug().gpus(8).running(since=NOW).on("n-0"),
            job("P").gpus(8).submitted(NOW),
        ],
        preempt("dbg"),
    ),
]

NEWEST = Case(
    # alpha 0: weight no longer depends on run time, so both weigh 100; no loss either
    # (emergency checkpoint). `new` started 5 h after `old`: it is the victim.
    "newest among equal weight and loss",
    nodes(2),
    [
        normal("old", since=0).on("n-0"),
        normal("new", since=5 * HOUR).on("n-1"),
        preemptor(),
    ],
    preempt("new"),
    config=PolicyConfig(alpha=0.0),
)

GANGS = [
    Case(
        # a 2×8 gang with min_available 2: taking one task would leave it hanging
        "a victim gang is taken whole",
        nodes(2),
        [job("g").gang(2, gpus=8).running().on_each("n-0", "n-1"), preemptor()],
        preempt("g"),
    ),
]

ELASTIC_VICTIM = Case(
    # elastic 2×8, min_available 1: only task 1 (above the minimum) need go
    "only tasks above min_available are taken from an elastic victim",
    nodes(2),
    [
        job("e").gang(2, gpus=8, min_available=1).running().on_each("n-0", "n-1"),
        preemptor(),
    ],
    {"e": ("preempt", "P", (1,))},
)

ELASTIC_VICTIM_LOSSY = Case(
    # the same without an emergency checkpoint: the whole gang would lose work, its extra
    # task loses nothing, so the extra task is the cheaper unit
    "only tasks above min_available, when the gang would lose work",
    nodes(2),
    [
        job("e")
        .gang(2, gpus=8, min_available=1)
        .no_emergency_checkpoint()
        .running()
        .on_each("n-0", "n-1"),
        preemptor(),
    ],
    {"e": ("preempt", "P", (1,))},
)

ELASTIC_ONE_AT_A_TIME = Case(
    # elastic 3×8, min_available 1: the 8-GPU preemptor needs one task's worth — only the
    # last started extra task goes (issue 11, bug 2: not both extras as one bundle)
    "elastic extra tasks are taken one at a time",
    nodes(3),
    [
        job("e").gang(3, gpus=8, min_available=1).running().on_each("n-0", "n-1", "n-2"),
        preemptor(),
    ],
    {"e": ("preempt", "P", (2,))},
)

FEASIBILITY = [
    Case(
        # n-0: a1 (4, cheap) + protected 4; n-1: b1 (4, cheap) + protected 4; n-2: e (8).
        # Evicting a1 and b1 frees 8 GPUs that no single 8-GPU task can use.
        "freed GPUs must fit the task on one node",
        nodes(3),
        [
            normal("a1", gpus=4, since=NOW).on("n-0"),
            job("pa").gpus(4).protected().running().on("n-0"),
            normal("b1", gpus=4, since=NOW).on("n-1"),
            job("pb").gpus(4).protected().running().on("n-1"),
            normal("e", since=0).on("n-2"),
            preemptor(),
        ],
        preempt("e"),
    ),
    Case(
        # tier-1 domains {n-0,n-1} and {n-2,n-3}; c2 is the cheapest victim, but its domain
        # also holds a protected job, so the only feasible set is {c0, e1}
        "the victim set must satisfy the preemptor's hard topology",
        nodes(4, per_tier1=2),
        [
            normal("c0", since=NOW - 600).on("n-0"),
            normal("e1", since=0).on("n-1"),
            normal("c2", since=NOW - 60).on("n-2"),
            job("p3").gpus(8).protected().running().on("n-3"),
            job("P").large().gang(2, gpus=8).topology(tier=1, mode="hard").submitted(NOW),
        ],
        preempt("c0", "e1"),
        config=PolicyConfig(eviction_budget=1.0),  # the budget has its own cases
    ),
    Case(
        # each tier-1 domain holds a protected node: no set of victims can host 2×8 in one
        "nothing is evicted when no victim set can place the preemptor",
        nodes(4, per_tier1=2),
        [
            normal("v0").on("n-0"),
            job("p1").gpus(8).protected().running().on("n-1"),
            normal("v2").on("n-2"),
            job("p3").gpus(8).protected().running().on("n-3"),
            job("P").large().gang(2, gpus=8).topology(tier=1, mode="hard").submitted(NOW),
        ],
        {},
    ),
    Case(
        # one 8-GPU victim is enough; v1 is the cheaper (it ran 1 h less)
        "only as many victims as needed",
        nodes(2),
        [normal("v0", since=HOUR).on("n-0"), normal("v1", since=2 * HOUR).on("n-1"), preemptor()],
        preempt("v1"),
    ),
]

NEVER = [
    Case(
        "a protected job is never a victim",
        nodes(1),
        [job("p").gpus(8).protected().running().on("n-0"), preemptor()],
        {},
    ),
    Case(
        "a critical job is never a victim, not even for another critical job",
        nodes(1),
        [job("c").critical().gpus(8).running().on("n-0"), preemptor().critical()],
        {},
    ),
    Case(
        "kube-system jobs are conformance-protected",
        nodes(1),
        [job("k").gpus(8).namespace("kube-system").running().on("n-0"), preemptor()],
        {},
    ),
    Case(
        "system priority classes are conformance-protected",
        nodes(1),
        [
            job("k").gpus(8).priority_class("system-node-critical").running().on("n-0"),
            preemptor(),
        ],
        {},
    ),
    Case(
        # debug's policy is Never; nothing below it exists, so also check a pending debug
        # next to an even cheaper-looking running debug job
        "a debug job never causes an eviction",
        nodes(1),
        [job("d0").debug().gpus(8).running().on("n-0"), job("d1").debug().gpus(8).submitted(NOW)],
        {},
    ),
    Case(
        "equal priorities never preempt: normal vs normal",
        nodes(1),
        [normal("v").on("n-0"), job("P").gpus(8).submitted(NOW)],
        {},
    ),
    Case(
        "equal priorities never preempt: large vs large",
        nodes(1),
        [job("v").large().gpus(8).running().on("n-0"), preemptor()],
        {},
    ),
    Case(
        # 10 h run, reports 90 % done: 100 + 100·ln(11) + 600·0.81 ≈ 826 → capped at 800,
        # not below the large job's 800
        "a normal job 90 % done after 10 h is safe from a large job",
        nodes(1),
        [normal("old").progress(0.9).on("n-0"), preemptor()],
        {},
    ),
    Case(
        "a normal job 90 % done after 10 h still gives way to a critical job",
        nodes(1),
        [normal("old").progress(0.9).on("n-0"), preemptor().critical()],
        preempt("old"),
    ),
]

COOLDOWN = [
    Case(
        # evicted 5 min ago, cooldown 10 min
        "a job evicted within the cooldown is not taken again",
        nodes(1),
        [normal("v", since=NOW - 200).evicted_at(NOW - 300).on("n-0"), preemptor()],
        {},
    ),
    Case(
        "a critical job ignores the cooldown",
        nodes(1),
        [normal("v", since=NOW - 200).evicted_at(NOW - 300).on("n-0"), preemptor().critical()],
        preempt("v"),
    ),
    Case(
        "after the cooldown the job may be taken again",
        nodes(1),
        [normal("v", since=NOW - 200).evicted_at(NOW - 601).on("n-0"), preemptor()],
        preempt("v"),
    ),
]

BUDGET = [
    Case(
        # 4×8 = 32 GPUs: budget max(0.3·32, one node = 8) = 9.6 GPUs. The 2×8 preemptor needs
        # both victims; the first (8 GPUs) goes now, the second waits for the next cycle
        "per-cycle budget: 30 % of the cluster's GPUs",
        nodes(4),
        [
            normal("v0", since=HOUR).on("n-0"),
            normal("v1", since=2 * HOUR).on("n-1"),
            normal("x2").protected().on("n-2"),
            normal("x3").protected().on("n-3"),
            job("P").large().gang(2, gpus=8).submitted(NOW),
        ],
        preempt("v1"),
        want_pending_victims={"P": ("v0",)},
    ),
    Case(
        # with 50 % (16 GPUs) both go at once
        "a larger budget lets the whole plan go in one cycle",
        nodes(4),
        [
            normal("v0", since=HOUR).on("n-0"),
            normal("v1", since=2 * HOUR).on("n-1"),
            normal("x2").protected().on("n-2"),
            normal("x3").protected().on("n-3"),
            job("P").large().gang(2, gpus=8).submitted(NOW),
        ],
        preempt("v0", "v1"),
        config=PolicyConfig(eviction_budget=0.5),
        want_pending_victims={"P": ()},
    ),
    Case(
        # 2×8 = 16 GPUs: 30 % is 4.8, so the floor of one node's worth (8) applies
        "the budget is at least one node's worth",
        nodes(2),
        [normal("v0").on("n-0"), normal("x").protected().on("n-1"), preemptor()],
        preempt("v0"),
    ),
    Case(
        # two preemptors, one victim each: after the first 8 GPUs only 1.6 are left
        "the budget is shared by every preemptor of the cycle",
        nodes(4),
        [
            normal("v0", since=HOUR).on("n-0"),
            normal("v1", since=2 * HOUR).on("n-1"),
            normal("x2").protected().on("n-2"),
            normal("x3").protected().on("n-3"),
            preemptor("P1"),
            preemptor("P2").submitted(NOW + 1),
        ],
        preempt("v1", by="P1"),
        want_pending_victims={"P1": (), "P2": ("v0",)},
        now=NOW + 1,
    ),
]


def reclaim(*victims: str, by: str = "P") -> Want:
    return {v: ("reclaim", by, ()) for v in victims}


def two_teams(lender: QueueBuilder, borrower: QueueBuilder) -> list[QueueBuilder]:
    return [lender, borrower]


RECLAIM = [
    Case(
        # 4×8: `b` deserves 8 and holds 24; `a` deserves 24, holds 0 and needs 8
        "reclaim takes from a reclaimable queue above its deserved share",
        nodes(4),
        [
            normal("b0", since=0).queue("b").on("n-0"),
            normal("b1", since=HOUR).queue("b").on("n-1"),
            normal("b2", since=2 * HOUR).queue("b").on("n-2"),
            normal("x").protected().queue("a").on("n-3"),
            preemptor().queue("a"),
        ],
        reclaim("b2"),
        queues=two_teams(queue("a").deserved(gpu=24), queue("b").deserved(gpu=8)),
    ),
    Case(
        "reclaim never takes from a queue marked reclaimable: false",
        nodes(4),
        [
            normal("b0").queue("b").on("n-0"),
            normal("b1").queue("b").on("n-1"),
            normal("b2").queue("b").on("n-2"),
            normal("x").protected().queue("a").on("n-3"),
            preemptor().queue("a"),
        ],
        {},
        queues=two_teams(
            queue("a").deserved(gpu=24), queue("b").deserved(gpu=8).reclaimable(False)
        ),
    ),
    Case(
        # `b` holds exactly what it deserves
        "reclaim never takes a queue below its deserved share",
        nodes(4),
        [
            normal("b0").queue("b").on("n-0"),
            normal("b1").queue("b").on("n-1"),
            normal("x").protected().queue("a").on("n-2"),
            normal("y").protected().queue("a").on("n-3"),
            preemptor().queue("a"),
        ],
        {},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=16)),
    ),
    Case(
        # `b` deserves 8 but is guaranteed 16 and holds 16
        "reclaim never takes a queue below its guarantee",
        nodes(4),
        [
            normal("b0").queue("b").on("n-0"),
            normal("b1").queue("b").on("n-1"),
            normal("x").protected().queue("a").on("n-2"),
            normal("y").protected().queue("a").on("n-3"),
            preemptor().queue("a"),
        ],
        {},
        queues=two_teams(queue("a").deserved(gpu=24), queue("b").deserved(gpu=8).guarantee(gpu=16)),
    ),
    Case(
        # `a` deserves 8 and already holds 8: taking more would make it the borrower
        "a queue at its deserved share cannot reclaim",
        nodes(4),
        [
            normal("b0").queue("b").on("n-0"),
            normal("b1").queue("b").on("n-1"),
            normal("b2").queue("b").on("n-2"),
            normal("x").protected().queue("a").on("n-3"),
            preemptor().queue("a"),
        ],
        {},
        queues=two_teams(queue("a").deserved(gpu=8), queue("b").deserved(gpu=8)),
    ),
    Case(
        # `b` deserves 8, holds 24 and could lose 16; the 8-GPU preemptor needs one victim
        "reclaim takes only what the preemptor needs",
        nodes(4),
        [
            normal("b0", since=3 * HOUR).queue("b").on("n-0"),
            normal("b1", since=2 * HOUR).queue("b").on("n-1"),
            normal("b2", since=HOUR).queue("b").on("n-2"),
            normal("x").protected().queue("a").on("n-3"),
            preemptor().queue("a"),
        ],
        reclaim("b0"),
        queues=two_teams(queue("a").deserved(gpu=24), queue("b").deserved(gpu=8)),
    ),
    Case(
        # b holds 24 (deserved 8): equal priority is no shield across queues (issue 11;
        # before, a normal job never reclaimed from a normal borrower). Equal loss, weight
        # and start: the id decides.
        "reclaim follows shares, not priorities",
        nodes(4),
        [
            normal("b0").queue("b").on("n-0"),
            normal("b1").queue("b").on("n-1"),
            normal("b2").queue("b").on("n-2"),
            normal("x").protected().queue("a").on("n-3"),
            job("P").gpus(8).queue("a").submitted(NOW),
        ],
        reclaim("b0"),
        queues=two_teams(queue("a").deserved(gpu=24), queue("b").deserved(gpu=8)),
    ),
    Case(
        # b deserves 4 and holds one 8-GPU job: above its share before the eviction, so its
        # last victim may take it below (Volcano's proportion plugin; before, the floor
        # max(deserved, guarantee) after the eviction kept such a borrower forever).
        # a: 8 held + 8 for P = its 16 deserved
        "the last victim may take a queue below its deserved share",
        nodes(2),
        [
            normal("b0").queue("b").on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            preemptor().queue("a"),
        ],
        reclaim("b0"),
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=4)),
    ),
    Case(
        # the same, but b is guaranteed 4: evicting b0 would leave it 0 < 4
        "never below the guarantee",
        nodes(2),
        [
            normal("b0").queue("b").on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            preemptor().queue("a"),
        ],
        {},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=4).guarantee(gpu=4)),
    ),
    Case(
        # a large job of a borrowing queue is reclaimed by a normal job of a queue below its
        # share: whatever their priority
        "a higher-priority borrower is reclaimed too",
        nodes(2),
        [
            job("b0").large().gpus(8).queue("b").running().on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            job("P").gpus(8).queue("a").submitted(NOW),
        ],
        {"b0": ("reclaim", "P", ())},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # 10 h run and 90 % done: W_eff escalated to the 800 ceiling, and expected to end in
        # 30 min, before P's one-hour start SLO runs out: waited for, not reclaimed (DESIGN
        # §4.1 as amended, issue 37)
        "a job escalated to the ceiling that ends inside the SLO is not reclaimed",
        nodes(2),
        [
            normal("old").progress(0.9).expected(NOW + 1800).queue("b").on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            preemptor().queue("a"),
        ],
        {},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # the same, expected to end in 2 h, after P's SLO runs out: reclaimed like any
        # other borrower (DESIGN §4.1 as amended)
        "a job escalated to the ceiling that ends after the SLO is reclaimed",
        nodes(2),
        [
            normal("old").progress(0.9).expected(NOW + 7200).queue("b").on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            preemptor().queue("a"),
        ],
        {"old": ("reclaim", "P", ())},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # escalated by the progress it reports, with no expected_duration and nothing
        # learned of its queue: nobody can say it ends inside the SLO, so it is reclaimed
        "a job escalated to the ceiling with no expected end is reclaimed",
        nodes(2),
        [
            normal("old").progress(0.9).queue("b").on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            preemptor().queue("a"),
        ],
        {"old": ("reclaim", "P", ())},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # ... and a job the same age whose SLO already ran out: it waits for nobody
        "a preemptor past its SLO reclaims a job escalated to the ceiling",
        nodes(2),
        [
            normal("old").progress(0.9).expected(NOW + 60).queue("b").on("n-0"),
            normal("x").protected().queue("a").on("n-1"),
            job("P").large().gpus(8).submitted(NOW - 2 * HOUR).queue("a"),
        ],
        {"old": ("reclaim", "P", ())},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # victims of another queue are never taken by preempt, only by reclaim
        "preempt stays inside the preemptor's queue",
        nodes(1),
        [normal("b0").queue("b").on("n-0"), preemptor().queue("a")],
        {},
        queues=two_teams(queue("a").deserved(gpu=0.001), queue("b").deserved(gpu=8)),
    ),
]

BORROWERS_FIRST = [
    Case(
        # a deserves 16 and holds 8 (`mine`, normal, a legitimate victim of the large P); b
        # deserves nothing and borrows 8. a + P = 16 stays within its share: P takes the
        # lent room back before it evicts its own queue's work (Kueue: borrowers first)
        "borrowers first: reclaim before preempting the own queue",
        nodes(2),
        [
            normal("mine").queue("a").on("n-0"),
            normal("b0").queue("b").on("n-1"),
            preemptor().queue("a"),
        ],
        reclaim("b0"),
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # the same, but b0 cannot checkpoint and has run 10 h: reclaiming it loses work,
        # preempting `mine` (emergency checkpoint) loses none — least work lost comes first
        "least work lost before borrowers first",
        nodes(2),
        [
            normal("mine").queue("a").on("n-0"),
            normal("b0").no_emergency_checkpoint().queue("b").on("n-1"),
            preemptor().queue("a"),
        ],
        preempt("mine"),
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
    ),
    Case(
        # P needs two whole nodes (2 × 8): its own queue's `mine` frees one, b's borrowed job
        # the other; neither kind alone places P, so the plan takes both. a ends at
        # 8 - 8 + 16 = its 16 deserved.
        "a plan may combine its own queue's victims and borrowers",
        nodes(2),
        [
            normal("mine").queue("a").on("n-0"),
            normal("b0").queue("b").on("n-1"),
            job("P").large().gang(2, gpus=8).queue("a").submitted(NOW),
        ],
        {"mine": ("preempt", "P", ()), "b0": ("reclaim", "P", ())},
        queues=two_teams(queue("a").deserved(gpu=16), queue("b").deserved(gpu=0)),
        config=PolicyConfig(eviction_budget=1.0),
    ),
    Case(
        # the same with a deserving only 8: 8 - 8 + 16 = 16 > 8, a would become a borrower
        "a combined plan still keeps the preemptor's queue within its share",
        nodes(2),
        [
            normal("mine").queue("a").on("n-0"),
            normal("b0").queue("b").on("n-1"),
            job("P").large().gang(2, gpus=8).queue("a").submitted(NOW),
        ],
        {},
        queues=two_teams(queue("a").deserved(gpu=8), queue("b").deserved(gpu=0)),
        config=PolicyConfig(eviction_budget=1.0),
    ),
]

CAPPED = [
    Case(
        # `team` may hold 8 GPUs and holds 8 (v0, v1) while n-2 is free: P fits in the free
        # room but not under the cap — it takes the victim that frees enough quota (issue 11,
        # bug 1: before, a capped job never searched for victims)
        "a job capped by its own queue's capability preempts inside it",
        nodes(3),
        [
            normal("v0", gpus=4, since=HOUR).queue("team").on("n-0"),
            normal("v1", gpus=4, since=2 * HOUR).queue("team").on("n-1"),
            preemptor(gpus=4).queue("team"),
        ],
        preempt("v1"),
        queues=[queue("team").capability(gpu=8)],
    ),
    Case(
        # freeing 2 GPUs of quota is not enough for a 4-GPU preemptor: v0 and v1 both go
        "quota victims free as much of the capability as the preemptor needs",
        nodes(2),
        [
            normal("v0", gpus=2, since=HOUR).queue("team").on("n-0"),
            normal("v1", gpus=2, since=2 * HOUR).queue("team").on("n-0"),
            preemptor(gpus=4).queue("team"),
        ],
        preempt("v0", "v1"),
        queues=[queue("team").capability(gpu=4)],
    ),
    Case(
        # the capability is the obstacle, and another queue's victims cannot free it
        "reclaim never frees a capped queue's quota",
        nodes(2),
        [
            normal("t0", gpus=8).queue("team").protected().on("n-0"),
            normal("b0", gpus=8).queue("b").on("n-1"),
            preemptor(gpus=8).queue("team"),
        ],
        {},
        queues=[queue("team").capability(gpu=8), queue("b").deserved(gpu=0)],
    ),
]

CASES = [
    *ORDER,
    NEWEST,
    *GANGS,
    ELASTIC_VICTIM,
    ELASTIC_VICTIM_LOSSY,
    ELASTIC_ONE_AT_A_TIME,
    *FEASIBILITY,
    *NEVER,
    *COOLDOWN,
    *BUDGET,
    *RECLAIM,
    *BORROWERS_FIRST,
    *CAPPED,
]


def decide(case: Case):  # type: ignore[no-untyped-def]
    snap = snapshot(
        case.nodes, queues=case.queues, jobs=case.jobs, now=case.now, config=case.config
    )
    return snap, run(snap, CALDERA)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_victims(case: Case) -> None:
    _, decisions = decide(case)
    assert decided_evictions(decisions) == case.want_evictions
    # Whoever evicted holds a nomination naming exactly its victims; nobody else does.
    nominated = {n.job: n.nomination for n in decisions.nominations if n.nomination}
    evicted_by: dict[str, set[str]] = {}
    for e in decisions.evictions:
        evicted_by.setdefault(str(e.preemptor), set()).add(e.job)
    assert set(nominated) == set(evicted_by) | set(case.want_pending_victims)
    for holder, nomination in nominated.items():
        pending = case.want_pending_victims.get(holder, ())
        assert nomination.pending_victims == pending
        assert set(nomination.victims) == evicted_by.get(holder, set()) | set(pending)
    # A preemptor waiting for its victims starts nothing in the same cycle.
    assert not {s.job for s in decisions.starts} & set(nominated)


def test_a_jobs_overlapping_units_free_each_task_once() -> None:
    """An elastic victim offers its whole gang and each task above `min_available`: a plan's
    quota check (a combined plan keeping its queue within its deserved share) must count each
    task once — counting 2 + 2 + 6 GPUs for a 6-GPU job let a reclaim through that left the
    preemptor's queue over its share (test_reclaim_properties)."""
    nodes = cluster().group("n", count=1).build()
    elastic = job("e").gang(3, gpus=2, min_available=1).running(since=0)
    view = elastic.on("n-0").on("n-0").on("n-0").view(nodes)
    units = victim_units(view, PolicyConfig(), 3600.0)
    assert len(units) == 3  # two extra tasks, then the whole gang
    assert freed_by(units, "default") == view.spec.task_request.scaled(3)
