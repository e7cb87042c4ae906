"""The replay's measurement (caldera.replay.measure) against the simulator's own metrics.

Measuring a simulator run from its event log must give the simulator's figures exactly: the
only thing a replay on Kubernetes changes is where the occurrences come from. Cases cover
lost work (seed-starvation under volcano and priority-kill), gang hang (research gangs cut by
priority-kill), a warm-up, waits and SLAs (mixed-small) — each checked to be non-trivial so
that agreement means something.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from caldera.config import Scenario
from caldera.replay.measure import Occurrence, Timeline, from_simulation
from caldera.sim import Simulator, load_scenario, parse_scenario

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "examples"
UNOBSERVABLE = {"throttle_episodes", "throttle_held_seconds"}  # caldera's own state, not pods'

GANGS: dict[str, Any] = {
    "cluster": {"nodes": [{"prefix": "g", "count": 4, "gpus": 8}]},
    "queues": [{"name": "q", "weight": 1}],
    "workload": {"warmup": 600},
    "jobs": [
        {"name": f"r{i}", "queue": "q", "type": "normal", "submit": 60 * i, "duration": 7200,
         "tasks": 2, "gpus_per_task": 6, "checkpoint_interval": 1800}
        for i in range(2)
    ]
    + [
        {"name": "big", "queue": "q", "type": "large-job", "submit": 2400, "duration": 3600,
         "tasks": 1, "gpus_per_task": 8},
        {"name": "big2", "queue": "q", "type": "large-job", "submit": 2500, "duration": 3600,
         "tasks": 1, "gpus_per_task": 8},
    ],
    "until": 20000,
}  # fmt: skip


SCENARIOS = {"gangs": GANGS}
HERE = Path(__file__).resolve().parent


def _measured(scenario: Scenario) -> tuple[dict[str, Any], dict[str, Any]]:
    simulator = Simulator(scenario).run()
    result = simulator.result()
    specs = {s.spec.id: s.spec for s in scenario.submissions}
    capacity = sum(n.capacity_milli for n in scenario.nodes)
    timeline = from_simulation(
        result, specs, capacity, scenario.config.slo, scenario.warmup, simulator.now
    )
    return result["metrics"], timeline.result(scenario.config.name)["metrics"]


CASES = [
    ("seed-starvation", "volcano", "wasted_gpu_hours"),
    ("seed-starvation", "priority-kill", "wasted_gpu_hours"),
    ("seed-starvation", "caldera", "preemptions"),
    ("mixed-small", "caldera", "gpu_utilization"),
    ("mixed-small", "volcano", "gpu_utilization"),
    ("gangs", "priority-kill", "gang_hang_events"),
    ("gangs", "volcano", "preemptions"),
    ("replay-small", "caldera", "preemptions"),
]


@pytest.mark.parametrize(("name", "policy", "nonzero"), CASES)
def test_measuring_a_simulator_run_gives_the_simulators_metrics(
    name: str, policy: str, nonzero: str
) -> None:
    if name in SCENARIOS:
        scenario = parse_scenario(SCENARIOS[name], name=name)
    elif (HERE / f"{name}.yaml").exists():
        scenario = load_scenario(HERE / f"{name}.yaml")
    else:
        scenario = load_scenario(SHARED / f"{name}.yaml")
    expected, measured = _measured(scenario.with_policy(policy))
    value = expected[nonzero]
    assert value if not isinstance(value, dict) else value["total"], f"{nonzero} is zero here"
    for key, want in expected.items():
        if key not in UNOBSERVABLE:
            assert measured[key] == want, key


def test_a_compressed_timeline_is_reported_in_scenario_seconds() -> None:
    """Times and GPU-seconds are multiplied by the factor; shares and counts are not."""
    from caldera.model import JobSpec, JobType

    spec = JobSpec(id="a", name="a", queue="q", type=JobType.NORMAL, submit=0, tasks=2,
                   gpu=8000, duration=100)  # fmt: skip
    timeline = Timeline({"a": spec}, capacity=16_000, slo={"normal": 60.0}, end=10.0)
    timeline.add(Occurrence(0.0, "submit", "a"))
    timeline.add(Occurrence(1.0, "bind", "a", tasks=1))
    timeline.add(Occurrence(2.0, "bind", "a", tasks=1))  # the gang is whole: it starts
    timeline.add(Occurrence(6.0, "evict", "a", tasks=1, lost=40.0))  # cut: the other hangs
    timeline.add(Occurrence(7.0, "release", "a", tasks=1))
    result = timeline.result("x", factor=60)
    job = result["jobs"][0]
    assert (job["submit"], job["start"], job["evictions"]) == (0, 120, 1)
    assert job["lost_gpu_seconds"] == 2400
    metrics = result["metrics"]
    assert metrics["wait"]["normal"]["max"] == 120
    assert metrics["sla_attainment"]["normal"] == 0.0  # evicted
    assert metrics["gang_hang_events"] == 1
    # the task left running makes no progress from 6 to 10, as the first bound one did
    # from 1 to 2; the leaving one's GPUs count as releasing, not hung, until 7
    assert metrics["gang_hang_gpu_hours"] == pytest.approx(8 * (1 + 4) * 60 / 3600)
    # allocated GPU-seconds: 8×1 + 16×4 + 16×1 (one leaving) + 8×3 = 112 of 16×10
    assert metrics["gpu_utilization"] == pytest.approx(112 / 160)
    assert metrics["observed_seconds"] == 600
