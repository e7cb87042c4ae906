"""The `production` generator: determinism, every parameter doing what it says, the pool."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from caldera.model import JobType, TopologyMode
from caldera.sim import Scenario, ScenarioError, parse_scenario
from caldera.sim.production import offered_load
from caldera.sim.production_model import ProductionModel
from caldera.sim.shared_traces import load_runtimes

DAY = 86_400


def production(philly: Path, **params: Any) -> Scenario:
    """A scenario with only the generator (so it supplies the pool and queues)."""
    params = {"kind": "production", "seed": 7, "days": 2, **params}
    params.setdefault("research", {})
    params["research"] = {"runtimes": str(philly), **params["research"]}
    return parse_scenario({"workload": {"generators": [params]}})


def by_type(scenario: Scenario, job_type: JobType) -> list[Any]:
    return [s.spec for s in scenario.submissions if s.spec.type is job_type]


def test_same_parameters_same_jobs_other_seed_other_jobs(philly: Path) -> None:
    first = production(philly)
    again = production(philly)
    other = production(philly, seed=8)
    assert [s.spec for s in first.submissions] == [s.spec for s in again.submissions]
    assert [s.spec.submit for s in first.submissions] != [s.spec.submit for s in other.submissions]


def test_kinds_draw_independently(philly: Path) -> None:
    """Changing one kind's rate leaves the other kinds' jobs as they were."""
    base = production(philly)
    busier = production(philly, debug={"per_day": 400})
    for job_type in (JobType.LARGE, JobType.NORMAL, JobType.CRITICAL):
        assert by_type(base, job_type) == by_type(busier, job_type)
    assert len(by_type(busier, JobType.DEBUG)) > len(by_type(base, JobType.DEBUG))


def test_default_pool_and_queues(philly: Path) -> None:
    scenario = production(philly, days=0.5)
    assert len(scenario.nodes) == 64 and {n.gpus for n in scenario.nodes} == {8}
    assert {n.gpu_model for n in scenario.nodes} == {"H100"}
    assert len({n.tier1 for n in scenario.nodes}) == 8  # leaves of 8 nodes
    assert len({n.tier2 for n in scenario.nodes}) == 2  # 4 leaves per spine
    queues = {q.name: q for q in scenario.queues}
    assert set(queues) == {"prod", "serving", "research", "dev"}
    assert not queues["prod"].reclaimable and not queues["serving"].reclaimable
    assert queues["research"].reclaimable
    deserved = sum(q.deserved.gpu for q in queues.values() if q.deserved) // 1000
    assert deserved == 512


def test_a_declared_cluster_and_queues_win(philly: Path) -> None:
    document = {
        "cluster": {"nodes": [{"prefix": "a", "count": 4, "gpus": 8}]},
        "queues": [{"name": "prod", "weight": 3}],
        "workload": {
            "generators": [
                {"kind": "production", "days": 0.2, "research": {"runtimes": str(philly)}}
            ]
        },
    }
    scenario = parse_scenario(document)
    assert [n.name for n in scenario.nodes] == ["a-0", "a-1", "a-2", "a-3"]
    prod = next(q for q in scenario.queues if q.name == "prod")
    assert prod.weight == 3 and prod.deserved is None


def test_days_bound_submit_times(philly: Path) -> None:
    scenario = production(philly, days=1.5)
    assert max(s.spec.submit for s in scenario.submissions) < 1.5 * DAY
    assert min(s.spec.submit for s in scenario.submissions) >= 0


def test_production_gangs(philly: Path) -> None:
    gangs = by_type(production(philly, days=7), JobType.LARGE)
    assert gangs
    sizes = Counter(spec.tasks * spec.gpu // 1000 for spec in gangs)
    assert set(sizes) <= {32, 64, 128, 256}
    for spec in gangs:
        assert spec.gpu == 8000 and spec.min_available == spec.tasks
        assert spec.checkpoint.interval == 3600 and spec.checkpoint.on_sigterm
        assert spec.queue == "prod"
        assert spec.topology is not None and spec.topology.mode is TopologyMode.SOFT
        # One leaf is 64 GPUs: larger gangs look for a spine.
        assert spec.topology.highest_tier == (1 if spec.tasks <= 8 else 2)
        assert 3600 <= (spec.duration or 0) <= 48 * 3600
        assert spec.expected_duration == spec.duration


def test_research_runtimes_come_from_philly(philly: Path) -> None:
    runtimes = load_runtimes(philly)
    allowed = set(np.clip(runtimes, 60, 72 * 3600).tolist())
    research = by_type(production(philly), JobType.NORMAL)
    assert research
    assert all(spec.duration in allowed for spec in research)
    assert {spec.gpu for spec in research} <= {1000, 2000, 4000, 8000}
    assert all(spec.tasks == 1 and spec.queue == "research" for spec in research)
    # Long runs always checkpoint; most others do too, a few never.
    long_runs = [s for s in research if (s.duration or 0) >= 4 * 3600]
    assert all(s.checkpoint.interval == 1800 for s in long_runs)
    shares = Counter(s.checkpoint.interval is not None for s in research)
    assert shares[True] > shares[False] > 0


def test_kind_parameters_apply(philly: Path) -> None:
    scenario = production(
        philly,
        inference={"per_day": 0},
        debug={"gpus": [0.25], "weights": [1], "queue": "notebooks"},
        research={"max_hours": 1, "gpus": [16], "weights": [1], "gpus_per_task": 4},
    )
    assert not by_type(scenario, JobType.CRITICAL)
    debug = by_type(scenario, JobType.DEBUG)
    assert debug and all(s.gpu == 250 and s.queue == "notebooks" for s in debug)
    assert "notebooks" in {q.name for q in scenario.queues}
    research = by_type(scenario, JobType.NORMAL)
    assert all(s.tasks == 4 and s.gpu == 4000 and (s.duration or 0) <= 3600 for s in research)


def test_scale_multiplies_arrivals(philly: Path) -> None:
    base = len(production(philly, days=4).submissions)
    doubled = len(production(philly, days=4, scale=2).submissions)
    assert 1.8 < doubled / base < 2.2


def test_daily_cycle_peaks_at_the_peak_hour(philly: Path) -> None:
    scenario = production(
        philly, days=14, research={"per_day": 2000, "amplitude": 0.8, "peak_hour": 15}
    )
    hours = Counter(int(s.submit % DAY // 3600) for s in by_type(scenario, JobType.NORMAL))
    assert hours[15] > 3 * hours[3]


def test_weekends_are_quieter(philly: Path) -> None:
    scenario = production(philly, days=14, research={"per_day": 1000, "weekend_factor": 0.3})
    days = Counter(int(s.submit // DAY) % 7 for s in by_type(scenario, JobType.NORMAL))
    assert days[5] + days[6] < 0.5 * (days[0] + days[1])


def test_default_mix_offers_a_busy_but_not_flooded_pool(philly: Path) -> None:
    load = offered_load(ProductionModel(research={"runtimes": str(philly)}), Path.cwd())
    assert 0.8 < load["share"] < 1.05
    assert load["production"] > load["inference"] > load["debug"]


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"days": 0}, "days"),
        ({"colour": "red"}, "unknown key"),
        ({"research": {"gpus": [1, 2], "weights": [1]}}, "same length"),
        ({"research": {"runtimes": "nowhere.csv"}}, "no such file"),
    ],
    ids=["zero days", "unknown key", "weights length", "missing runtimes"],
)
def test_bad_parameters_are_one_line_errors(
    philly: Path, params: dict[str, Any], want: str
) -> None:
    generator = {"kind": "production", **params}
    generator.setdefault("research", {})
    generator["research"] = {"runtimes": str(philly), **generator["research"]}
    with pytest.raises(ScenarioError) as error:
        parse_scenario({"workload": {"generators": [generator]}})
    message = str(error.value)
    assert want in message and "\n" not in message
    assert message.startswith("workload.generators[0]")


def test_more_days_keep_the_first_days(philly: Path) -> None:
    short = production(philly, days=2)
    longer = production(philly, days=3)
    kept = [s.spec for s in longer.submissions if s.spec.submit < 2 * DAY]
    assert sorted(kept, key=lambda s: s.id) == sorted(
        (s.spec for s in short.submissions), key=lambda s: s.id
    )
