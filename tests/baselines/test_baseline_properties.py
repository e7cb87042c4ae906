"""Properties of the baselines over random small scenarios (hypothesis).

For every baseline, whatever the workload — queues with quotas and a time window, gangs
with topology, GPU shares and model constraints, cancellations, protected and kube-system
jobs: the simulation completes (a node over capacity
would raise in the simulator's room index), the event log keeps the hard rules
(`log_violations`: queue capability, no victim at priority >= 1000 / protected /
kube-system, no debug preemptor, fifo never evicts), and the same scenario gives the same
result twice.
"""

from __future__ import annotations

from typing import Any

from baseline_support import log_violations
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.sim import parse_scenario, simulate

BASELINES = ("fifo", "priority-kill", "volcano")
TYPES = ("critical", "large-job", "normal", "normal", "debug")


@st.composite
def job_entry(draw: st.DrawFn, index: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(TYPES))
    tasks = draw(st.sampled_from([1, 1, 2, 3, 4]))
    gpus = (
        draw(st.sampled_from([1, 2, 4, 8]))
        if tasks > 1
        else draw(st.sampled_from([0.5, 1, 2, 4, 8]))
    )
    job: dict[str, Any] = {
        "name": f"j{index}",
        "queue": draw(st.sampled_from(["a", "b", "c"])),
        "type": kind,
        "submit": draw(st.integers(0, 4 * 3600)),
        "duration": draw(st.integers(60, 6 * 3600)),
        "tasks": tasks,
        "gpus_per_task": gpus,
        "checkpoint_interval": draw(st.sampled_from([600, 1800, 3600])),
    }
    if tasks > 1:
        job["min_available"] = draw(st.integers(1, tasks))
        if draw(st.booleans()):
            job["topology"] = {"mode": draw(st.sampled_from(["hard", "soft"])), "highest_tier": 1}
    if draw(st.integers(0, 5)) == 0:
        job["cancel_at"] = job["submit"] + draw(st.integers(0, 3 * 3600))
    if draw(st.integers(0, 4)) == 0:
        job["gpu_model"] = draw(st.sampled_from(["H100", "A100"]))
    extra = draw(st.sampled_from(["", "", "", "protected", "kube-system"]))
    if extra == "protected":
        job["labels"] = {"protected": "true"}
    elif extra == "kube-system":
        job["namespace"] = "kube-system"
    return job


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(2, 5))
    jobs = [draw(job_entry(i)) for i in range(draw(st.integers(4, 24)))]
    queues = [
        {
            "name": name,
            "weight": draw(st.integers(1, 3)),
            "reclaimable": draw(st.booleans()),
            **(
                {"capability": {"gpu": draw(st.sampled_from([8, 16, 24]))}}
                if draw(st.booleans())
                else {}
            ),
            **({"guarantee": {"gpu": 4}} if draw(st.booleans()) else {}),
        }
        for name in ("a", "b", "c")
    ]
    if draw(st.booleans()):  # queue c runs only from 02:00 to 06:00
        queues[2]["time_windows"] = [{"hours": [2, 6]}]
    groups: list[dict[str, Any]] = [
        {
            "prefix": "n",
            "count": count,
            "gpus": 8,
            "gpu_model": "H100",
            "nvlink_island": draw(st.sampled_from([4, 8])),
            "nodes_per_tier1": 2,
        }
    ]
    if draw(st.booleans()):
        groups.append(
            {"prefix": "a", "count": draw(st.integers(1, 2)), "gpus": 4, "gpu_model": "A100"}
        )
    return {
        "cluster": {"nodes": groups},
        "queues": queues,
        "jobs": jobs,
        "until": 12 * 3600,
    }


@settings(max_examples=25, deadline=None)
@given(scenarios())
def test_baselines_keep_the_hard_rules(data: dict[str, Any]) -> None:
    scenario = parse_scenario(data)
    for policy in BASELINES:
        result = simulate(scenario, policy)
        assert log_violations(result, scenario) == [], policy
        assert result["metrics"]["critical_preempted"] == 0
        assert simulate(scenario, policy) == result, f"{policy} is not deterministic"
