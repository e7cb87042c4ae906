"""Reclaim and preempt inside a department at its capability (DESIGN §2 "Hierarchy": a team's
capability and its department's both cap it; an over-cap preemptor frees what exceeds the
caps that bind). Only the department's own teams' victims free room under the department's
cap, so a team below its share takes from a sibling above its share when, and only when, that
frees what its gang takes the department beyond its cap (core/reclaim.py, `_cap_enough`); a
team's own victims free room under both caps, so they must free the larger excess
(core/pools.py, `over_capability`).

Each case: one node, every earlier job submitted at t = 0, 1, … and running past the case's
end unless said otherwise; the preemptor arrives at 600 and starts after the 120 s grace
period if it evicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from caldera.sim import parse_scenario, simulate


def job(name: str, queue: str, gpus: int, submit: float, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "type": more.pop("kind", "normal"),
        "submit": submit,
        "duration": more.pop("duration", 20_000),
        "gpus_per_task": gpus,
        "checkpoint_on_sigterm": False,
        **more,
    }


PROTECTED = {"labels": {"protected": "true"}}


@dataclass(frozen=True)
class Case:
    gpus: int
    queues: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    want_evictions: list[tuple[str, str, str, float]] = field(default_factory=list)
    want_starts: dict[str, float] = field(default_factory=dict)


CASES = {
    # d (deserved 4, cap 4) holds 4: a's protected 2 and a's 2 (a deserves 2); b (deserves
    # 2) asks 2. Evicting a's 2 keeps d at 4: b takes it back from its sibling.
    "a-sibling-frees-the-departments-excess": Case(
        gpus=8,
        queues=[
            {"name": "d", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "a", "parent": "d", "deserved": {"gpu": 2}},
            {"name": "b", "parent": "d", "deserved": {"gpu": 2}},
            {"name": "other", "deserved": {"gpu": 4}},
        ],
        jobs=[
            job("kept", "a", 2, 0, **PROTECTED),
            job("lent", "a", 2, 1),
            job("p", "b", 2, 600, duration=3600),
        ],
        want_evictions=[("lent", "reclaim", "p", 600.0)],
        want_starts={"p": 720.0},
    ),
    # The same department with a critical preemptor: it asks no share, only room under both
    # caps, which its sibling's victim frees.
    "a-critical-preemptor-frees-the-departments-excess-from-a-sibling": Case(
        gpus=8,
        queues=[
            {"name": "d", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "a", "parent": "d", "deserved": {"gpu": 2}},
            {"name": "b", "parent": "d", "deserved": {"gpu": 2}},
            {"name": "other", "deserved": {"gpu": 4}},
        ],
        jobs=[
            job("kept", "a", 2, 0, **PROTECTED),
            job("lent", "a", 2, 1),
            job("p", "b", 2, 600, kind="critical", duration=3600),
        ],
        want_evictions=[("lent", "reclaim", "p", 600.0)],
        want_starts={"p": 720.0},
    ),
    # d (cap 4) holds 3: a's protected 2 and a's 1 (a deserves 1); b (deserves 3) asks 3,
    # which takes d to 6, 2 beyond its cap. The node has room; a's 1 is all a sibling may
    # lose and frees too little: nothing is evicted (an eviction would buy b nothing), and b
    # starts when "kept" ends (20000): d then holds 1 + 3.
    "siblings-that-cannot-free-the-excess-lose-nothing": Case(
        gpus=16,
        queues=[
            {"name": "d", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "a", "parent": "d", "deserved": {"gpu": 1}},
            {"name": "b", "parent": "d", "deserved": {"gpu": 3}},
            {"name": "other", "deserved": {"gpu": 12}},
        ],
        jobs=[
            job("kept", "a", 2, 0, **PROTECTED),
            job("lent", "a", 1, 1, duration=40_000),
            job("busy", "other", 8, 2, duration=40_000),
            job("p", "b", 3, 600, duration=3600),
        ],
        want_starts={"p": 20_000.0},
    ),
    # d (cap 4) holds 4 on a's two jobs; "other" (deserved 0) borrows the rest of the node.
    # b's 2 would take d beyond its cap: room another department gives back frees nothing
    # under d's cap, so the borrower keeps running and a's job above a's share goes.
    "another-departments-borrower-frees-nothing-under-the-cap": Case(
        gpus=8,
        queues=[
            {"name": "d", "deserved": {"gpu": 8}, "capability": {"gpu": 4}},
            {"name": "a", "parent": "d", "deserved": {"gpu": 2}},
            {"name": "b", "parent": "d", "deserved": {"gpu": 6}},
            {"name": "other", "deserved": {"gpu": 0}},
        ],
        jobs=[
            job("kept", "a", 2, 0, **PROTECTED),
            job("lent", "a", 2, 1),
            job("borrower", "other", 4, 2),
            job("p", "b", 2, 600, duration=3600),
        ],
        want_evictions=[("lent", "reclaim", "p", 600.0)],
        want_starts={"p": 720.0},
    ),
    # a (cap 3) holds 2 on two debug jobs, b a protected 2: d (cap 4) at 4. a's normal 2
    # takes a 1 beyond its own cap and d 2 beyond its: a's own victims must free the larger
    # (both debug jobs go, a preempt), or d stays over its cap and p waits anyway.
    "a-team-over-both-caps-frees-the-larger-excess": Case(
        gpus=16,
        queues=[
            {"name": "d", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "a", "parent": "d", "deserved": {"gpu": 2}, "capability": {"gpu": 3}},
            {"name": "b", "parent": "d", "deserved": {"gpu": 2}},
            {"name": "other", "deserved": {"gpu": 12}},
        ],
        jobs=[
            job("a1", "a", 1, 0, kind="debug"),
            job("a2", "a", 1, 1, kind="debug"),
            job("b1", "b", 2, 2, **PROTECTED),
            job("p", "a", 2, 600, duration=3600),
        ],
        want_evictions=[("a1", "preempt", "p", 600.0), ("a2", "preempt", "p", 600.0)],
        want_starts={"p": 720.0},
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_eviction_inside_a_department_at_its_capability(case: Case) -> None:
    data = {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": case.gpus}]},
        "policy": {"grace_period": 120},
        "queues": case.queues,
        "jobs": case.jobs,
    }
    outcome = simulate(parse_scenario(data))
    evictions = [
        (e["job"], e["reason"], e["preemptor"], e["t"])
        for e in outcome["events"]
        if e["kind"] == "evict"
    ]
    assert sorted(evictions) == sorted(case.want_evictions)
    starts = {j["name"]: j["start"] for j in outcome["jobs"]}
    assert {name: starts[name] for name in case.want_starts} == case.want_starts
    assert outcome["metrics"]["gang_hang_gpu_hours"] == 0
