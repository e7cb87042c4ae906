"""The seeds' production pool as a seeded workload generator (`kind: production`).

    workload:
      generators:
        - {kind: production, seed: 7, days: 14}

Seed 001's situation: a fine-tuning pool of 512 H100 (64 nodes × 8 GPUs, one NVSwitch domain
per node, tier-1 leaf switches of 8 nodes, 4 leaves per spine) shared by four kinds of work:

- `production`: fine-tuning gangs of 32–256 GPUs (whole 8-GPU nodes), type `large-job`,
  hourly checkpoints and an emergency checkpoint on SIGTERM (the seed's signal interceptor),
  preferring (`topology: soft`) one leaf for ≤ 64 GPUs, one spine for larger gangs;
- `research`: 1–8 GPU jobs, type `normal`, run times drawn from the Microsoft Philly trace
  (`philly_runtime.csv`), clipped to [`min_seconds`, `max_hours`] (a pool's run-time limit; a
  53-day Philly job cannot fit a 14-day window). A share `checkpoint_share` of them, and every
  job of at least `checkpoint_after_hours`, checkpoint periodically and on SIGTERM (they use
  the platform's training image); the rest never do;
- `debug`: interactive sessions on a share of one GPU or one GPU, type `debug`, nothing to
  checkpoint: an eviction loses the session;
- `inference`: online-inference deployments of 1–8 GPUs, type `critical`, stateless.

Arrivals are Poisson per kind with a daily cycle: the rate at hour h of a weekday is
`per_day / 24 · (1 + amplitude · cos(2π (h − peak_hour) / 24))`, multiplied by
`weekend_factor` on Saturdays and Sundays (the simulation starts on a Monday 00:00). Sizes are
drawn from `gpus` with `weights`; durations are log-normal (`median_hours`, `sigma`, clipped to
[`min_hours`, `max_hours`]) except research run times, which come from the trace.

MIG (seed 004: production inference on MIG slices): `mig_nodes` of the pool's nodes carry
GPUs in MIG mode laid out as `mig` (`[{gpus: 2, slices: {1g.10gb: 7}}]`, the scenario's key),
and a kind's `profile_share` of its jobs ask for one slice of a profile drawn from `profiles`
instead of whole GPUs. Both default to none, which leaves every draw as it was.

Every parameter can be set in the scenario file, per kind (`research: {per_day: 300}`) or for
the pool (`nodes`, `gpus_per_node`, …). `scale` multiplies every arrival rate. The default
rates offer about 99 % of the pool's GPU-hours (`offered_load()` says how much exactly): a
pool where GPUs are always scarce (seed 001), with no kind tuned for or against any policy.
Randomness comes from one stream per kind and day, so more `days` keep the first days' jobs.

When the scenario has no `cluster`, the generator supplies the pool; for each queue name its
kinds use that the scenario does not declare, it supplies the queue, sized as a share of the
pool's GPUs (seeds 001 and 004): `prod` (production; deserved 68.75 %, guarantee 50 %, not
reclaimable), `serving` (inference; deserved 18.75 %, guarantee 12.5 %, capability 25 %, not
reclaimable), `research` (deserved 7.8 %, may borrow the whole pool, reclaimable) and `dev`
(debug; deserved and capability 4.7 %, the seeds' small dev-test queue). Other queue names get
a plain queue.

The parameters' models live in `caldera.sim.production_model`; the Philly run times are read
by `caldera.sim.shared_traces`, which the burst generator shares.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from caldera.config import Submission
from caldera.model import (
    Checkpointing,
    JobSpec,
    JobType,
    NodeGroup,
    Queue,
    Resources,
    TopologyMode,
    TopologySpec,
    parse_memory_mib,
    slice_milli,
)
from caldera.sim.generators import register_generator
from caldera.sim.production_model import KindModel, ProductionModel, ResearchModel
from caldera.sim.scenario import mig_layouts
from caldera.sim.shared_traces import load_runtimes, runtimes_path
from caldera.sim.workload import Workload

__all__ = ["generate_production", "offered_load"]

_DAY = 86_400.0
_HOUR = 3_600.0


def _research_runtimes(kind: ResearchModel, base: Path) -> Path:
    return runtimes_path(kind.runtimes, base, "research.runtimes", "research.runtimes")


# -- drawing --------------------------------------------------------------------------------


def _rate(kind: KindModel, t: np.ndarray) -> np.ndarray:
    """Arrivals per second at times `t` (seconds since a Monday 00:00)."""
    hour = (t % _DAY) / _HOUR
    daily = 1.0 + kind.amplitude * np.cos(2 * math.pi * (hour - kind.peak_hour) / 24.0)
    weekend = ((t // _DAY) % 7) >= 5
    return kind.per_day / _DAY * daily * np.where(weekend, kind.weekend_factor, 1.0)


def _arrivals(
    rng: np.random.Generator, kind: KindModel, begin: float, end: float, scale: float
) -> Any:
    """A non-homogeneous Poisson process on [begin, end) by thinning: candidates at the peak
    rate, each kept with probability rate(t) / peak."""
    peak = kind.per_day * scale / _DAY * (1.0 + kind.amplitude) * max(kind.weekend_factor, 1.0)
    if peak <= 0 or end <= begin:
        return np.empty(0)
    count = rng.poisson(peak * (end - begin))
    times = np.sort(rng.uniform(begin, end, count))
    keep = rng.uniform(0.0, 1.0, count) < _rate(kind, times) * scale / peak
    return times[keep]


def _lognormal_hours(rng: np.random.Generator, kind: KindModel, n: int) -> Any:
    hours = kind.median_hours * np.exp(kind.sigma * rng.standard_normal(n))
    return np.clip(hours, kind.min_hours, kind.max_hours) * _HOUR


def _sizes(rng: np.random.Generator, kind: KindModel, n: int) -> Any:
    weights = np.asarray(kind.weights, dtype=float)
    return rng.choice(np.asarray(kind.gpus, dtype=float), size=n, p=weights / weights.sum())


def _spec(
    name: str,
    job_type: JobType,
    kind: KindModel,
    submit: float,
    duration: float,
    gpus: float,
    checkpoints: bool,
    model: ProductionModel,
    profile: str | None = None,
) -> JobSpec:
    per_task = kind.gpus_per_task
    duration = round(duration, 3)
    if profile is not None:  # one MIG slice
        gpus, per_task = 1.0, None
    if per_task is not None and gpus > per_task:
        tasks = max(round(gpus / per_task), 1)
        milli = round(per_task * 1000)
    else:
        tasks, milli = 1, round(gpus * 1000)
    topology = None
    if tasks > 1:
        per_tier1 = model.nodes_per_tier1 * model.gpus_per_node if model.nodes_per_tier1 else 0
        narrow = not per_tier1 or gpus <= per_tier1
        mode = kind.topology if narrow else kind.wide_topology
        if mode != "none":
            topology = TopologySpec(TopologyMode(mode), 1 if narrow else 2)
    if checkpoints:
        checkpoint = Checkpointing(
            kind.checkpoint_interval, kind.checkpoint_cost, kind.checkpoint_on_sigterm
        )
    else:
        # A kind where nobody checkpoints but `checkpoint_on_sigterm` holds is stateless
        # (inference replicas): it stops at once and has nothing to redo. In a kind where
        # only some jobs checkpoint, the others have no handler and lose their work.
        stateless = kind.checkpoint_on_sigterm and kind.checkpoint_share == 0
        checkpoint = Checkpointing(None, 0.0, stateless)
    return JobSpec(
        id=name,
        name=name,
        queue=kind.queue,
        type=job_type,
        submit=round(submit, 3),
        tasks=tasks,
        gpu=milli,
        checkpoint=checkpoint,
        expected_duration=duration if kind.expected_duration else None,
        topology=topology,
        duration=duration,
        gpu_profile=profile,
    )


def _pools(model: ProductionModel) -> tuple[NodeGroup, ...]:
    whole = _pool(model, model.nodes - model.mig_nodes)
    if not model.mig_nodes:
        return (whole,)
    mig = replace(
        _pool(model, model.mig_nodes),
        prefix=f"{model.gpu_model.lower()}-mig",
        mig=mig_layouts(model.mig),
    )
    return (whole, mig) if whole.count else (mig,)


def _pool(model: ProductionModel, count: int) -> NodeGroup:
    return NodeGroup(
        prefix=model.gpu_model.lower(),
        count=count,
        gpus=model.gpus_per_node,
        gpu_model=model.gpu_model,
        cpu=model.cpu * 1000,
        memory=parse_memory_mib(model.memory),
        nvlink_island=model.nvlink_island,
        nodes_per_tier1=model.nodes_per_tier1,
        tier1_per_tier2=model.tier1_per_tier2,
    )


def _queues(model: ProductionModel) -> tuple[Queue, ...]:
    """The seeds' queues (seed 004 §6.2, seed 001) sized as shares of the pool."""
    total = model.gpus * 1000

    def gpus(share: float) -> Resources:
        return Resources(gpu=int(total * share) // 1000 * 1000)

    queues = {
        # Production fine-tuning: most of the pool, never lent out for good.
        "prod": Queue(
            "prod",
            weight=70,
            deserved=gpus(0.6875),
            guarantee=gpus(0.5),
            capability=gpus(1.0),
            reclaimable=False,
        ),
        # Online inference: a guaranteed slice, never reclaimed.
        "serving": Queue(
            "serving",
            weight=10,
            deserved=gpus(0.1875),
            guarantee=gpus(0.125),
            capability=gpus(0.25),
            reclaimable=False,
        ),
        # Research borrows whatever is idle and gives it back (the seeds' elastic queue).
        "research": Queue(
            "research",
            weight=15,
            deserved=gpus(0.078125),
            capability=gpus(1.0),
            reclaimable=True,
        ),
        # Debug sessions: a small capped queue (the seeds' dev-test queue).
        "dev": Queue(
            "dev",
            weight=5,
            deserved=gpus(0.046875),
            capability=gpus(0.046875),
            reclaimable=True,
        ),
    }
    names = {kind.queue for kind, _ in model.kinds().values()}
    extra = tuple(Queue(name) for name in sorted(names - set(queues)))
    return tuple(q for name, q in queues.items() if name in names) + extra


def offered_load(model: ProductionModel, base: Path) -> dict[str, float]:
    """Expected GPU-hours per day each kind offers, and the total as a share of the pool."""
    load: dict[str, float] = {}
    for name, (kind, _) in model.kinds().items():
        weights = np.asarray(kind.weights, dtype=float)
        mean_gpus = float(np.dot(np.asarray(kind.gpus, dtype=float), weights / weights.sum()))
        if kind.profile_share > 0:  # MIG slices count by their GPU-equivalent
            slices = sum(slice_milli(p) for p in kind.profiles) / len(kind.profiles) / 1000
            mean_gpus += kind.profile_share * (slices - mean_gpus)
        if isinstance(kind, ResearchModel):
            runtimes = load_runtimes(_research_runtimes(kind, base))
            hours = float(
                np.clip(runtimes, kind.min_seconds, kind.max_hours * _HOUR).mean() / _HOUR
            )
        else:
            draws = np.random.default_rng(0).standard_normal(200_000)
            hours = float(
                np.clip(
                    kind.median_hours * np.exp(kind.sigma * draws), kind.min_hours, kind.max_hours
                ).mean()
            )
        week = (5 + 2 * kind.weekend_factor) / 7
        load[name] = kind.per_day * model.scale * week * mean_gpus * hours
    load["share"] = sum(load.values()) / (model.gpus * 24)
    return load


def generate_production(params: dict[str, Any], base: Path) -> Workload:
    """Draw the pool's jobs for `days` days; the same parameters always give the same jobs."""
    try:
        model = ProductionModel.model_validate(params)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise ValueError(f"{where}: {message}") from None
    horizon = model.days * _DAY
    submissions: list[Submission] = []
    for name, (kind, job_type) in model.kinds().items():
        runtimes = (
            load_runtimes(_research_runtimes(kind, base))
            if isinstance(kind, ResearchModel)
            else None
        )
        count = 0
        for day in range(math.ceil(model.days)):
            # One stream per kind and day: another kind's parameters, or more days, leave these
            # draws as they were.
            rng = np.random.default_rng([model.seed, zlib.crc32(name.encode()), day])
            times = _arrivals(rng, kind, day * _DAY, min((day + 1) * _DAY, horizon), model.scale)
            n = len(times)
            if isinstance(kind, ResearchModel) and runtimes is not None:
                durations = np.clip(
                    rng.choice(runtimes, size=n), kind.min_seconds, kind.max_hours * _HOUR
                )
            else:
                durations = _lognormal_hours(rng, kind, n)
            sizes = _sizes(rng, kind, n)
            checkpoints = rng.uniform(0.0, 1.0, n) < kind.checkpoint_share
            if kind.checkpoint_after_hours is not None:
                checkpoints |= durations >= kind.checkpoint_after_hours * _HOUR
            profiles: list[str | None] = [None] * n
            if kind.profile_share > 0:  # drawn last: without MIG the draws stay as they were
                sliced = rng.uniform(0.0, 1.0, n) < kind.profile_share
                chosen = rng.integers(0, len(kind.profiles), n)
                profiles = [
                    kind.profiles[c] if s else None for s, c in zip(sliced, chosen, strict=True)
                ]
            for i in range(n):
                job = _spec(
                    f"{model.prefix}{name}-{count}",
                    job_type,
                    kind,
                    float(times[i]),
                    float(durations[i]),
                    float(sizes[i]),
                    bool(checkpoints[i]),
                    model,
                    profiles[i],
                )
                submissions.append(Submission(job))
                count += 1
    return Workload(tuple(submissions), _pools(model), _queues(model))


register_generator("production")(generate_production)
