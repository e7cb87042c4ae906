"""Hypothesis properties of reclaim over whole simulations (DESIGN §4.1, issue 11).

Random clusters and 2-3 queues (deserved shares — an explicit zero included — guarantees,
reclaimable or not), every job submitted in the first 20 minutes and running far past the
end, so that after the last submission nothing changes but what the scheduler decides:
- **no ping-pong**: once the last job is submitted, no two queues reclaim from each other —
  a queue that took room from another is never reclaimed by it afterwards (each reclaim moves
  room towards the deserved shares, and nothing else moves it back);
- **no queue below its guarantee**: after each reclaim the victim queue still runs at least
  its guaranteed GPUs;
- **a reclaimer's queue stays within its deserved share**: a non-critical reclaimer's queue,
  with what it runs and the reclaimer's gang, holds at most its deserved GPUs;
- **the victim queue was above its deserved share** before the eviction.
The per-cycle rules (every victim helps place its preemptor, floors, priorities inside a
queue) are checked on every cycle by `invariant_checks.violations` in the simulator property.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from caldera.sim import parse_scenario, simulate

HORIZON = 6 * 3600
TYPES = ["normal", "normal", "large-job", "debug", "critical"]


@st.composite
def contended(draw: st.DrawFn) -> dict[str, Any]:
    gpus = draw(st.sampled_from([4, 8]))
    count = draw(st.integers(1, 3))
    total = gpus * count
    queues = []
    for i in range(draw(st.integers(2, 3))):
        queue: dict[str, Any] = {
            "name": f"q{i}",
            "weight": draw(st.integers(1, 3)),
            "reclaimable": draw(st.booleans()) or i == 0,
        }
        if draw(st.booleans()):
            queue["deserved"] = {"gpu": draw(st.integers(0, total))}
        if draw(st.integers(0, 2)) == 0:
            queue["guarantee"] = {"gpu": draw(st.integers(0, total // 2))}
        queues.append(queue)
    jobs = []
    for i in range(draw(st.integers(2, 12))):
        tasks = draw(st.integers(1, 3))
        queue = draw(st.integers(0, len(queues) - 1))
        jobs.append(
            {
                "name": f"j{i}",
                "queue": f"q{queue}",
                "type": draw(st.sampled_from(TYPES)),
                # q0 mostly fills the cluster first: the others then take back their share
                "submit": 0
                if queue == 0 and draw(st.booleans())
                else 60 * draw(st.integers(0, 20)),
                "duration": 10 * HORIZON,
                "tasks": tasks,
                "min_available": draw(st.integers(1, tasks)),
                "gpus_per_task": draw(st.sampled_from([1, 2, gpus])),
                "checkpoint_cost": draw(st.sampled_from([0, 30])),
                "checkpoint_on_sigterm": draw(st.booleans()),
            }
        )
    return {
        "cluster": {"nodes": [{"prefix": "n", "count": count, "gpus": gpus}]},
        "queues": queues,
        "jobs": jobs,
        "until": HORIZON,
    }


def _deserved(data: dict[str, Any], name: str) -> float:
    total = sum(g["count"] * g["gpus"] for g in data["cluster"]["nodes"])
    weights = sum(q["weight"] for q in data["queues"])
    queue = next(q for q in data["queues"] if q["name"] == name)
    if "deserved" in queue:
        return float(queue["deserved"]["gpu"])
    return total * queue["weight"] / weights


def _reclaim_problems(data: dict[str, Any], result: dict[str, Any]) -> list[str]:
    specs = {j["name"]: j for j in data["jobs"]}
    guarantee = {q["name"]: q.get("guarantee", {}).get("gpu", 0) for q in data["queues"]}
    last_submit = max(j["submit"] for j in data["jobs"])
    running: dict[str, float] = {}  # GPUs each job runs (not releasing)
    took_from: set[tuple[str, str]] = set()  # (reclaimer's queue, victim's queue)
    problems: list[str] = []

    def held(queue: str) -> float:
        return sum(g for job, g in running.items() if specs[job]["queue"] == queue)

    # A reclaimer's own share is checked once all of its plan's evictions of that moment are
    # in: a combined plan frees its own queue's victims too (DESIGN §4.1, reclaim (c)). Some
    # of them may be signalled in later cycles (the per-cycle eviction budget, DESIGN §3
    # rule 6, keeps them pending in the nomination): those count for the plan as well.
    reclaimers: dict[str, float] = {}  # reclaimer -> when
    own_later: dict[str, list[tuple[float, float]]] = {}  # reclaimer -> (when, GPUs) freed
    for event in result["events"]:
        preemptor = event.get("preemptor")
        own = preemptor is not None and specs[event["job"]]["queue"] == specs[preemptor]["queue"]
        if event["kind"] == "evict" and own:
            own_later.setdefault(preemptor, []).append((event["t"], event["gpus"]))

    def check_shares() -> None:
        for preemptor, when in reclaimers.items():
            reclaimer = specs[preemptor]
            mine = reclaimer["queue"]
            gang = reclaimer.get("min_available", 1) * reclaimer["gpus_per_task"]
            pending = sum(g for t, g in own_later.get(preemptor, ()) if t > when)
            kept = held(mine) - pending
            if reclaimer["type"] != "critical" and kept + gang > _deserved(data, mine) + 1e-9:
                problems.append(f"t={when}: {preemptor} reclaims, {mine} would be over share")
        reclaimers.clear()

    for event in result["events"]:
        kind, name, t = event["kind"], event["job"], event["t"]
        # A plan's evict lines may have other lines between them (a victim's checkpoint, its
        # queue's throttle): the plan is over at the next line that changes what runs.
        changes = kind in ("start", "finish", "fail", "cancel")
        if changes or any(when != t for when in reclaimers.values()):
            check_shares()
        if kind == "start":
            running[name] = running.get(name, 0.0) + event["gpus"]
        elif kind in ("finish", "fail", "cancel"):
            running.pop(name, None)
        elif kind == "evict":
            victim_queue = specs[name]["queue"]
            before = held(victim_queue)
            running[name] = running.get(name, 0.0) - event["gpus"]
            if event["reason"] != "reclaim":
                continue
            reclaimers[event["preemptor"]] = t
            mine = specs[event["preemptor"]]["queue"]
            if held(victim_queue) < guarantee[victim_queue] - 1e-9:
                problems.append(f"t={t}: {victim_queue} reclaimed below its guarantee")
            if before <= _deserved(data, victim_queue) + 1e-9:
                problems.append(f"t={t}: {name} reclaimed from {victim_queue} within its share")
            if t > last_submit:
                if (victim_queue, mine) in took_from:
                    problems.append(f"t={t}: ping-pong, {mine} takes back from {victim_queue}")
                took_from.add((mine, victim_queue))
    check_shares()
    return problems


@given(contended())
def test_reclaim_never_ping_pongs_or_breaks_a_floor(data: dict[str, Any]) -> None:
    result = simulate(parse_scenario(data))
    assert _reclaim_problems(data, result) == []


@pytest.mark.parametrize(
    ("found", "between"),
    [
        ("reclaim-checkpoint-between-evicts.yaml", [("checkpoint", "j0")]),
        ("reclaim-throttle-between-evicts.yaml", [("checkpoint", "j0"), ("throttle_on", None)]),
    ],
)
def test_lines_between_a_plans_evictions_keep_the_plan_whole(
    found: str, between: list[tuple[str, str | None]]
) -> None:
    """Cases the thorough profile found (tests/sim/found/): j3's plan reclaims j0 and preempts
    its own queue's 1-GPU job at the same moment, with j0's checkpoint line (and q0's throttle,
    j0 being a large job) between the two evictions. The share check must wait for both, or
    it sees q2 holding the 1-GPU job beside j3 and reports a breach the plan never made."""
    path = Path(__file__).resolve().parents[1] / "sim" / "found" / found
    data = yaml.safe_load(path.read_text())
    result = simulate(parse_scenario(data))
    evicts = [i for i, e in enumerate(result["events"]) if e["kind"] == "evict"]
    assert len(evicts) == 2 and result["events"][evicts[0]]["reason"] == "reclaim"
    lines = result["events"][evicts[0] + 1 : evicts[1]]
    assert [(e["kind"], e["job"]) for e in lines] == between
    assert _reclaim_problems(data, result) == []
