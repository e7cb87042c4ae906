"""A backlog burst as a seeded workload generator (`kind: burst`).

    workload:
      generators:
        - {kind: burst, seed: 7, jobs: 20000}

Most benchmark workloads arrive spread over days, so few jobs ever wait. A burst is the other
case — a deadline week, a paper rush, a night of batch submissions — and the way the public
PAI simulator feeds its 6,500-GPU runs: `jobs` submissions arriving at `per_minute` a minute
(Poisson), on `nodes` × `gpus_per_node` GPUs split into `queues` equal team queues
(`team-0` …, weight 1 each, reclaimable), so that thousands of jobs wait at once and most of
them need preemption or reclaim that cannot succeed.

Every job draws, independently:
- a type: `critical` with `critical_share`, `large-job` with `large_share`, `debug` with
  `debug_share`, otherwise `normal`;
- a size in GPUs from `sizes` / `size_weights` (mostly 1 GPU, a tail of 2–64-GPU gangs);
  `large-job` draws from `large_sizes` (gangs of 8–64); `critical` jobs are 1–2 GPUs
  (inference replicas). Jobs of more than `gpus_per_node` GPUs are gangs of whole nodes
  (`gpus_per_node` GPUs a task), all-or-nothing, with `topology: soft` inside one leaf;
- a run time from the Microsoft Philly trace (`philly_runtime.csv`), clipped to
  [`min_seconds`, `max_hours`];
- checkpointing: a share `checkpoint_share` checkpoints every `checkpoint_interval` seconds
  and on SIGTERM; the others lose their work when evicted;
- a queue, uniformly.

The same parameters always give the same jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from caldera.config import Submission
from caldera.model import (
    Checkpointing,
    JobSpec,
    JobType,
    NodeGroup,
    Queue,
    TopologyMode,
    TopologySpec,
)
from caldera.sim.generators import register_generator
from caldera.sim.shared_traces import load_runtimes, runtimes_path
from caldera.sim.workload import Workload

__all__ = ["BurstModel", "generate_burst"]

_HOUR = 3600.0


class BurstModel(BaseModel):
    """The burst's parameters; every one can be set in the scenario file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = "burst"
    seed: int = 7
    jobs: int = Field(20_000, ge=1)
    per_minute: float = Field(1_000.0, gt=0)
    nodes: int = Field(813, ge=1)
    gpus_per_node: int = Field(8, ge=1)
    gpu_model: str = "H100"
    nodes_per_tier1: int = Field(8, ge=0)
    tier1_per_tier2: int = Field(4, ge=0)
    queues: int = Field(4, ge=1)
    critical_share: float = Field(0.05, ge=0, le=1)
    large_share: float = Field(0.10, ge=0, le=1)
    debug_share: float = Field(0.05, ge=0, le=1)
    sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    size_weights: tuple[float, ...] = (0.78, 0.07, 0.05, 0.05, 0.025, 0.015, 0.01)
    large_sizes: tuple[int, ...] = (8, 16, 32, 64)
    large_weights: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    min_seconds: float = Field(60.0, gt=0)
    max_hours: float = Field(48.0, gt=0)
    checkpoint_share: float = Field(0.5, ge=0, le=1)
    checkpoint_interval: float = Field(1800.0, gt=0)
    checkpoint_cost: float = Field(30.0, ge=0)
    runtimes: str | None = None  # default ../shared/traces/philly/philly_runtime.csv
    prefix: str = "b"

    @model_validator(mode="after")
    def _check(self) -> BurstModel:
        if self.critical_share + self.large_share + self.debug_share > 1:
            raise ValueError("critical_share + large_share + debug_share must be <= 1")
        for sizes, weights, label in (
            (self.sizes, self.size_weights, "sizes"),
            (self.large_sizes, self.large_weights, "large_sizes"),
        ):
            if not sizes or len(sizes) != len(weights):
                raise ValueError(f"{label} and its weights must be non-empty and equally long")
            if min(sizes) < 1 or min(weights) < 0 or sum(weights) <= 0:
                raise ValueError(f"{label}: sizes >= 1 and weights >= 0, not all zero")
        return self


def _runtime_path(model: BurstModel, base: Path) -> Path:
    return runtimes_path(model.runtimes, base, "burst.runtimes", "runtimes")


def _draw_sizes(
    rng: np.random.Generator, values: tuple[int, ...], weights: tuple[float, ...], n: int
) -> Any:
    p = np.asarray(weights, dtype=float)
    return rng.choice(np.asarray(values), size=n, p=p / p.sum())


def _spec(model: BurstModel, index: int, draw: dict[str, Any]) -> JobSpec:
    gpus = int(draw["gpus"])
    per_node = model.gpus_per_node
    if gpus > per_node:
        tasks, per_task = -(-gpus // per_node), per_node
        topology: TopologySpec | None = TopologySpec(TopologyMode.SOFT, 1)
    else:
        tasks, per_task, topology = 1, gpus, None
    checkpoint = (
        Checkpointing(model.checkpoint_interval, model.checkpoint_cost, True)
        if draw["checkpoints"]
        else Checkpointing(None, 0.0, False)
    )
    name = f"{model.prefix}{index}"
    return JobSpec(
        id=name,
        name=name,
        queue=f"team-{draw['queue']}",
        type=draw["type"],
        submit=round(float(draw["submit"]), 3),
        tasks=tasks,
        gpu=per_task * 1000,
        checkpoint=checkpoint,
        topology=topology,
        duration=round(float(draw["duration"]), 3),
    )


def generate_burst(params: dict[str, Any], base: Path) -> Workload:
    """Draw the burst: `jobs` submissions, their pool and their queues."""
    try:
        model = BurstModel.model_validate(params)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise ValueError(f"{where}: {message}") from None
    runtimes = load_runtimes(_runtime_path(model, base))
    rng = np.random.default_rng(model.seed)
    n = model.jobs
    submits = np.cumsum(rng.exponential(60.0 / model.per_minute, n))
    durations = np.clip(rng.choice(runtimes, size=n), model.min_seconds, model.max_hours * _HOUR)
    roll = rng.uniform(0.0, 1.0, n)
    small = _draw_sizes(rng, model.sizes, model.size_weights, n)
    large = _draw_sizes(rng, model.large_sizes, model.large_weights, n)
    inference = rng.integers(1, 3, n)
    queues = rng.integers(0, model.queues, n)
    checkpoints = rng.uniform(0.0, 1.0, n) < model.checkpoint_share
    critical_until = model.critical_share
    large_until = critical_until + model.large_share
    debug_until = large_until + model.debug_share
    submissions = []
    for i in range(n):
        r = roll[i]
        if r < critical_until:
            job_type, gpus = JobType.CRITICAL, inference[i]
        elif r < large_until:
            job_type, gpus = JobType.LARGE, large[i]
        elif r < debug_until:
            job_type, gpus = JobType.DEBUG, small[i]
        else:
            job_type, gpus = JobType.NORMAL, small[i]
        draw = {
            "gpus": gpus,
            "type": job_type,
            "submit": submits[i],
            "duration": durations[i],
            "checkpoints": bool(checkpoints[i]),
            "queue": int(queues[i]),
        }
        submissions.append(Submission(_spec(model, i, draw)))
    pool = NodeGroup(
        prefix=model.gpu_model.lower(),
        count=model.nodes,
        gpus=model.gpus_per_node,
        gpu_model=model.gpu_model,
        nodes_per_tier1=model.nodes_per_tier1,
        tier1_per_tier2=model.tier1_per_tier2,
    )
    teams = tuple(Queue(f"team-{q}", reclaimable=True) for q in range(model.queues))
    return Workload(tuple(submissions), (pool,), teams)


register_generator("burst")(generate_burst)
