"""`caldera bench sim`: how fast the simulator replays big workloads, end to end.

Two workloads, each timed from a loaded scenario to the finished §6 result document:

- `synthetic`: 20,000 jobs on a 6,504-GPU pool (813 nodes × 8 H100, leaves of 8 nodes, 4
  leaves per spine) from the `production` generator with every arrival rate scaled by the
  pool's size — gangs of 32–256 GPUs with topology, Philly run times, GPU shares, critical
  inference, preemption and reclaim — the first `jobs` submissions, run to completion. The
  public PAI simulator reports 51–110 s for 20,000 jobs on 6,500 GPUs with a simpler model;
- `openb`: the OpenB default trace (8,152 pods on 1,213 nodes) replayed as-is;
- `burst`: a backlog — `jobs` submissions arriving 1,000 a minute on `nodes` × 8 GPUs in four
  team queues (the `burst` generator, caldera.sim.burst, whose docstring names every
  parameter), so thousands of jobs wait at once and most preemption searches cannot succeed.

Timing excludes loading (reported apart) and includes building the result document. Both
wall-clock and CPU time of this process are reported: on a shared machine the wall clock
counts the time other processes held the cores, the CPU time does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from caldera.bench.cycles import ObservedSimulator
from caldera.bench.floor import RecordsDecisions, replay_floor
from caldera.compiled import status
from caldera.sim import Scenario, Simulator, parse_scenario
from caldera.sim.shared_traces import find_shared_file

__all__ = [
    "SimBenchResult",
    "bench_scenario",
    "burst_scenario",
    "openb_scenario",
    "synthetic_scenario",
]

_POOL_GPUS = 512  # the production generator's default pool, which its rates are sized for
_OPENB = Path("traces") / "openb"


def synthetic_scenario(jobs: int = 20_000, nodes: int = 813, seed: int = 7) -> Scenario:
    """The first `jobs` submissions of the production workload scaled to `nodes` × 8 GPUs."""
    gpus = nodes * 8
    scale = gpus / _POOL_GPUS
    # The default mix offers ~920 jobs/day on 512 GPUs; draw enough days for `jobs`, plus
    # a margin for the weekly cycle and Poisson noise.
    days = max(1.0, jobs / (900.0 * scale) * 1.2)
    name = f"synthetic-{jobs}-jobs-{gpus}-gpus"
    document = {
        "name": name,
        "workload": {
            "generators": [
                {"kind": "production", "seed": seed, "days": days, "nodes": nodes, "scale": scale}
            ]
        },
    }
    scenario = parse_scenario(document, Path.cwd(), name)
    if len(scenario.submissions) < jobs:
        raise ValueError(f"the generator drew only {len(scenario.submissions)} jobs")
    return replace(scenario, submissions=scenario.submissions[:jobs])


def burst_scenario(jobs: int = 20_000, nodes: int = 813, seed: int = 7) -> Scenario:
    """`jobs` submissions of the `burst` generator on `nodes` × 8 GPUs."""
    name = f"burst-{jobs}-jobs-{nodes * 8}-gpus"
    document = {
        "name": name,
        "workload": {"generators": [{"kind": "burst", "seed": seed, "jobs": jobs, "nodes": nodes}]},
    }
    return parse_scenario(document, Path.cwd(), name)


def openb_scenario(
    pods: str = "openb_pod_list_default.csv",
    nodes: str = "openb_node_list_gpu_node.csv",
    folder: Path | None = None,
) -> Scenario:
    """The OpenB trace from ../shared/traces/openb (or `folder`)."""
    if folder is None:
        found = find_shared_file(_OPENB / nodes, [Path.cwd(), Path(__file__).parent])
        if found is None:
            raise ValueError("../shared/traces/openb not found (give --traces DIR)")
        folder = found.parent
    name = f"openb-{Path(pods).stem}"
    document = {
        "name": name,
        "workload": {"trace": {"format": "openb", "nodes": nodes, "pods": pods}},
    }
    return parse_scenario(document, folder, name)


@dataclass(frozen=True)
class SimBenchResult:
    workload: str
    jobs: int
    nodes: int
    gpus: int
    load_seconds: float
    run_seconds: float
    run_cpu_seconds: float
    events: int
    simulated_days: float
    policy: str
    # With `breakdown`: the cycles by trigger, decision and change (caldera.bench.cycles).
    cycles: list[dict[str, Any]] | None = None
    # With `floor`: the same run with a core that costs nothing (caldera.bench.floor).
    floor_seconds: float | None = None
    floor_cpu_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.cycles is not None:
            extra = {
                "cycle_count": sum(row["cycles"] for row in self.cycles),
                "cycles": self.cycles,
            }
        if self.floor_cpu_seconds is not None and self.floor_seconds is not None:
            extra["floor_s"] = round(self.floor_seconds, 3)
            extra["floor_cpu_s"] = round(self.floor_cpu_seconds, 3)
        return {
            "workload": self.workload,
            "policy": self.policy,
            "jobs": self.jobs,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "load_s": round(self.load_seconds, 3),
            "run_s": round(self.run_seconds, 3),
            "run_cpu_s": round(self.run_cpu_seconds, 3),
            "events": self.events,
            "simulated_days": round(self.simulated_days, 2),
            "jobs_per_s": round(self.jobs / self.run_seconds, 1) if self.run_seconds else None,
            "core": status(),  # compiled or interpreted (caldera/compiled.py)
            **extra,
        }


def bench_scenario(
    name: str,
    build: Callable[[], Scenario],
    policy: str | None = None,
    watch: Callable[[Scenario], AbstractContextManager[Callable[[float], None] | None]]
    | None = None,
    breakdown: bool = False,
    floor: bool = False,
) -> SimBenchResult:
    """Build the scenario (timed apart), then time one full simulation and its result.
    `watch(scenario)`: a context giving a progress callback (simulated time), or None.
    `breakdown`: also classify and time every cycle (caldera.bench.cycles; a little slower).
    `floor`: then time the same run again with the recorded decisions handed back instead of
    the core's (caldera.bench.floor): what the simulator costs around any core."""
    began = time.perf_counter()
    scenario = build()
    if policy is not None:
        scenario = scenario.with_policy(policy)
    loaded = time.perf_counter()
    with nullcontext(None) if watch is None else watch(scenario) as progress:
        cpu = time.process_time()
        kind: type[Simulator] = ObservedSimulator if breakdown else Simulator
        if floor:
            kind = _ObservedAndRecorded if breakdown else RecordsDecisions
        simulator = kind(scenario, progress=progress).run()
        result = simulator.result()
        done = time.perf_counter()
        cpu_done = time.process_time()
    floor_wall = floor_cpu = None
    if isinstance(simulator, RecordsDecisions):
        floor_wall, floor_cpu = replay_floor(scenario, simulator.decided, result)
    return SimBenchResult(
        workload=name,
        jobs=len(scenario.submissions),
        nodes=len(scenario.nodes),
        gpus=sum(node.gpus for node in scenario.nodes),
        load_seconds=loaded - began,
        run_seconds=done - loaded,
        run_cpu_seconds=cpu_done - cpu,
        events=len(result["events"]),
        simulated_days=simulator.now / 86_400,
        policy=scenario.config.name,
        cycles=simulator.breakdown.as_list() if isinstance(simulator, ObservedSimulator) else None,
        floor_seconds=floor_wall,
        floor_cpu_seconds=floor_cpu,
    )


class _ObservedAndRecorded(RecordsDecisions, ObservedSimulator):
    """The timed run of `--floor --breakdown`."""
