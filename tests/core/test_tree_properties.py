"""Hypothesis properties of departments above teams over whole simulations (DESIGN §2
"Hierarchy", §4.1; issue 39).

Random trees — one to three departments of one to three teams each, and maybe a top-level
team — with deserved shares (a department's children's inside its own), guarantees and
capabilities at both levels; every job submitted in the first 20 minutes and running far
past the end (fair share over time on in half of them), so that after the last submission
only the scheduler moves room:
- **no queue or department below its guarantee** after a reclaim from it;
- **none over its capability**: at every start, what a team runs and what its department's
  teams run together fit their caps;
- **across departments only from one over its share**: a reclaim that crosses departments
  takes from a department holding more than its deserved share before the eviction;
- **no ping-pong between two departments**: once the last job is submitted, a department
  that took room from another is never reclaimed by it afterwards.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from caldera.sim import parse_scenario, simulate

HORIZON = 6 * 3600
TYPES = ["normal", "normal", "large-job", "debug", "critical"]


@st.composite
def trees(draw: st.DrawFn) -> dict[str, Any]:
    gpus = draw(st.sampled_from([4, 8]))
    count = draw(st.integers(2, 3))
    total = gpus * count
    queues: list[dict[str, Any]] = []
    teams: list[str] = []
    for d in range(draw(st.integers(1, 3))):
        deserved = draw(st.integers(0, total))
        guarantee = draw(st.integers(0, deserved // 2))
        department: dict[str, Any] = {"name": f"d{d}", "deserved": {"gpu": deserved}}
        if guarantee:
            department["guarantee"] = {"gpu": guarantee}
        capability = draw(st.one_of(st.none(), st.integers(max(gpus, deserved), total)))
        if capability is not None:
            department["capability"] = {"gpu": capability}
        queues.append(department)
        left_deserved, left_guarantee = deserved, guarantee
        for t in range(draw(st.integers(1, 3))):
            mine = draw(st.integers(0, left_deserved))
            floor = draw(st.integers(0, min(left_guarantee, mine)))
            left_deserved -= mine
            left_guarantee -= floor
            team: dict[str, Any] = {
                "name": f"d{d}t{t}",
                "parent": f"d{d}",
                "deserved": {"gpu": mine},
                "reclaimable": draw(st.booleans()) or t == 0,
            }
            if floor:
                team["guarantee"] = {"gpu": floor}
            if draw(st.integers(0, 3)) == 0:
                team["capability"] = {"gpu": capability or total}
            queues.append(team)
            teams.append(team["name"])
    if draw(st.booleans()):
        queues.append({"name": "solo", "deserved": {"gpu": draw(st.integers(0, total))}})
        teams.append("solo")
    jobs = []
    for i in range(draw(st.integers(2, 12))):
        tasks = draw(st.integers(1, 3))
        team_number = draw(st.integers(0, len(teams) - 1))
        jobs.append(
            {
                "name": f"j{i}",
                "queue": teams[team_number],
                "type": draw(st.sampled_from(TYPES)),
                # the first team mostly fills the cluster first: the others then take back
                "submit": 0
                if team_number == 0 and draw(st.booleans())
                else 60 * draw(st.integers(0, 20)),
                "duration": 10 * HORIZON,
                "tasks": tasks,
                "min_available": draw(st.integers(1, tasks)),
                "gpus_per_task": draw(st.sampled_from([1, 2, gpus])),
                "checkpoint_cost": draw(st.sampled_from([0, 30])),
                "checkpoint_on_sigterm": draw(st.booleans()),
            }
        )
    data: dict[str, Any] = {
        "cluster": {"nodes": [{"prefix": "n", "count": count, "gpus": gpus}]},
        "queues": queues,
        "jobs": jobs,
        "until": HORIZON,
    }
    if draw(st.booleans()):  # fair share over time orders lending only: the same properties
        data["policy"] = {"fair_share": {"half_life": draw(st.sampled_from([600, 3600]))}}
    return data


def _tree_problems(data: dict[str, Any], result: dict[str, Any]) -> list[str]:
    queues = {q["name"]: q for q in data["queues"]}
    specs = {j["name"]: j for j in data["jobs"]}
    last_submit = max(j["submit"] for j in data["jobs"])
    running: dict[str, float] = {}  # GPUs each job runs (not releasing)
    took_from: set[tuple[str, str]] = set()  # (reclaimer's department, victim's department)
    problems: list[str] = []

    def top(queue: str) -> str:
        return str(queues[queue].get("parent", queue))

    def held(name: str) -> float:
        """What a team, or a department's teams together, run."""
        return sum(
            g
            for job, g in running.items()
            if name in (specs[job]["queue"], top(specs[job]["queue"]))
        )

    def quota(name: str, kind: str) -> float:
        return float(queues[name].get(kind, {}).get("gpu", 0))

    for event in result["events"]:
        kind, name, t = event["kind"], event["job"], event["t"]
        if kind == "start":
            running[name] = running.get(name, 0.0) + event["gpus"]
            queue = specs[name]["queue"]
            for level in {queue, top(queue)}:
                cap = queues[level].get("capability")
                if cap is not None and held(level) > cap["gpu"] + 1e-9:
                    problems.append(f"t={t}: {level} over its capability")
        elif kind in ("finish", "fail", "cancel"):
            running.pop(name, None)
        elif kind == "evict":
            victim_queue = specs[name]["queue"]
            victim_top = top(victim_queue)
            department_before = held(victim_top)
            running[name] = running.get(name, 0.0) - event["gpus"]
            if event["reason"] != "reclaim":
                continue
            mine = top(specs[event["preemptor"]]["queue"])
            levels = [victim_queue] if mine == victim_top else [victim_queue, victim_top]
            for level in dict.fromkeys(levels):
                if held(level) < quota(level, "guarantee") - 1e-9:
                    problems.append(f"t={t}: {level} reclaimed below its guarantee")
            if mine == victim_top:
                continue
            if department_before <= quota(victim_top, "deserved") + 1e-9:
                problems.append(f"t={t}: {mine} took from {victim_top} within its share")
            if t > last_submit:
                if (victim_top, mine) in took_from:
                    problems.append(f"t={t}: ping-pong, {mine} takes back from {victim_top}")
                took_from.add((mine, victim_top))
    return problems


@given(trees())
def test_a_tree_keeps_its_floors_caps_and_never_ping_pongs(data: dict[str, Any]) -> None:
    result = simulate(parse_scenario(data))
    assert _tree_problems(data, result) == []
