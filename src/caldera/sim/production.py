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
"""

from __future__ import annotations

import functools
import math
import os
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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
    parse_profile,
    slice_milli,
)
from caldera.sim.generators import register_generator
from caldera.sim.scenario import MigModel, mig_layouts
from caldera.sim.workload import Workload

__all__ = [
    "PHILLY_RUNTIMES",
    "ProductionModel",
    "find_shared_file",
    "generate_production",
    "load_runtimes",
    "offered_load",
]

PHILLY_RUNTIMES = Path("traces") / "philly" / "philly_runtime.csv"
"""Where the Philly run times live inside ../shared."""

_DAY = 86_400.0
_HOUR = 3_600.0
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KindModel(_Strict):
    """One kind of work: arrival rate, sizes, durations, checkpointing."""

    queue: str
    per_day: Annotated[float, Field(ge=0)]
    gpus: list[Positive]
    weights: list[Annotated[float, Field(ge=0)]]
    amplitude: Share = 0.5
    peak_hour: Annotated[float, Field(ge=0, lt=24)] = 15.0
    weekend_factor: Annotated[float, Field(ge=0)] = 1.0
    median_hours: Positive = 1.0
    sigma: Annotated[float, Field(ge=0)] = 0.8
    min_hours: Annotated[float, Field(ge=0)] = 0.0
    max_hours: Positive = 72.0
    checkpoint_share: Share = 0.0
    checkpoint_interval: Positive | None = None
    checkpoint_cost: Annotated[float, Field(ge=0)] = 0.0
    checkpoint_on_sigterm: bool = False
    gpus_per_task: Positive | None = None  # gangs: GPUs per task (the rest makes the tasks)
    topology: Literal["hard", "soft", "none"] = "none"  # gangs that fit one tier-1 leaf
    wide_topology: Literal["hard", "soft", "none"] = "soft"  # larger gangs, within a spine
    checkpoint_after_hours: Positive | None = None  # jobs at least this long always checkpoint
    expected_duration: bool = False  # tell the scheduler the job's length (progress weight)
    profile_share: Share = 0.0  # jobs asking for one MIG slice instead (docs/gpus.md)
    profiles: list[str] = Field(default_factory=list)  # drawn uniformly for those jobs

    @model_validator(mode="after")
    def _check(self) -> KindModel:
        for profile in self.profiles:
            parse_profile(profile)
        if self.profile_share > 0 and not self.profiles:
            raise ValueError("profile_share needs profiles")
        if len(self.gpus) != len(self.weights) or not self.gpus:
            raise ValueError("gpus and weights must be non-empty lists of the same length")
        if sum(self.weights) <= 0:
            raise ValueError("weights must not all be zero")
        if self.min_hours > self.max_hours:
            raise ValueError("min_hours exceeds max_hours")
        return self


class ResearchModel(KindModel):
    runtimes: str | None = None  # Philly run times; default ../shared/traces/philly/…
    min_seconds: Annotated[float, Field(ge=0)] = 60.0


def _production() -> KindModel:
    return KindModel(
        queue="prod",
        per_day=8.0,
        gpus=[32, 64, 128, 256],
        weights=[0.45, 0.3, 0.17, 0.08],
        amplitude=0.3,
        peak_hour=11.0,
        median_hours=6.0,
        sigma=0.7,
        min_hours=1.0,
        max_hours=48.0,
        checkpoint_share=1.0,
        checkpoint_interval=3600.0,
        checkpoint_cost=90.0,
        checkpoint_on_sigterm=True,
        gpus_per_task=8,
        topology="soft",
        expected_duration=True,
    )


def _research() -> ResearchModel:
    return ResearchModel(
        queue="research",
        per_day=900.0,
        gpus=[1, 2, 4, 8],
        weights=[0.5, 0.2, 0.15, 0.15],
        amplitude=0.5,
        peak_hour=15.0,
        weekend_factor=0.7,
        max_hours=72.0,
        checkpoint_share=0.8,
        checkpoint_after_hours=4.0,
        checkpoint_interval=1800.0,
        checkpoint_cost=30.0,
        checkpoint_on_sigterm=True,
    )


def _debug() -> KindModel:
    return KindModel(
        queue="dev",
        per_day=200.0,
        gpus=[0.5, 1],
        weights=[0.5, 0.5],
        amplitude=0.7,
        peak_hour=15.0,
        weekend_factor=0.3,
        median_hours=0.6,
        sigma=0.8,
        min_hours=5 / 60,
        max_hours=4.0,
    )


def _inference() -> KindModel:
    return KindModel(
        queue="serving",
        per_day=75.0,
        gpus=[1, 2, 4, 8],
        weights=[0.4, 0.3, 0.2, 0.1],
        amplitude=0.5,
        peak_hour=13.0,
        median_hours=4.0,
        sigma=0.8,
        min_hours=0.5,
        max_hours=48.0,
        checkpoint_on_sigterm=True,  # stateless: a replica stops at once on SIGTERM
    )


class ProductionModel(_Strict):
    """Parameters of `kind: production` (every one optional)."""

    kind: Literal["production"] = "production"
    seed: int = 7
    days: Positive = 14.0
    scale: Annotated[float, Field(ge=0)] = 1.0
    prefix: str = ""  # job-name prefix, to combine two generators in one scenario
    # The pool.
    nodes: Annotated[int, Field(ge=1)] = 64
    gpus_per_node: Annotated[int, Field(ge=1)] = 8
    gpu_model: str = "H100"
    nvlink_island: Annotated[int, Field(ge=0)] = 8
    nodes_per_tier1: Annotated[int, Field(ge=0)] = 8
    tier1_per_tier2: Annotated[int, Field(ge=0)] = 4
    cpu: Annotated[int, Field(ge=1)] = 128
    memory: str | int = "2048Gi"
    mig_nodes: Annotated[int, Field(ge=0)] = 0  # nodes of the pool with GPUs in MIG mode
    mig: list[MigModel] = Field(default_factory=list)  # their layout (the scenario's key)
    # The work.
    production: KindModel = Field(default_factory=_production)
    research: ResearchModel = Field(default_factory=_research)
    debug: KindModel = Field(default_factory=_debug)
    inference: KindModel = Field(default_factory=_inference)

    @model_validator(mode="before")
    @classmethod
    def _merge_kinds(cls, data: Any) -> Any:
        """A kind given partly in the file keeps the defaults for what it leaves out."""
        if not isinstance(data, dict):
            return data
        defaults = {
            "production": _production,
            "research": _research,
            "debug": _debug,
            "inference": _inference,
        }
        merged = dict(data)
        for name, factory in defaults.items():
            given = merged.get(name)
            if isinstance(given, dict):
                merged[name] = {**factory().model_dump(), **given}
        return merged

    @model_validator(mode="after")
    def _check_mig(self) -> ProductionModel:
        if self.mig_nodes > self.nodes:
            raise ValueError("mig_nodes exceeds nodes")
        if self.mig_nodes and not self.mig:
            raise ValueError("mig_nodes needs a mig layout")
        return self

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def kinds(self) -> dict[str, tuple[KindModel, JobType]]:
        return {
            "production": (self.production, JobType.LARGE),
            "research": (self.research, JobType.NORMAL),
            "debug": (self.debug, JobType.DEBUG),
            "inference": (self.inference, JobType.CRITICAL),
        }


# -- the Philly run times -------------------------------------------------------------------


def find_shared_file(relative: Path, bases: Sequence[Path]) -> Path | None:
    """`shared/<relative>` beside any of `bases` or their parents (the repo sits beside
    ../shared), or under $CALDERA_SHARED."""
    env = os.environ.get("CALDERA_SHARED")
    if env and (Path(env) / relative).is_file():
        return Path(env) / relative
    for base in bases:
        for folder in (base.resolve(), *base.resolve().parents):
            candidate = folder / "shared" / relative
            if candidate.is_file():
                return candidate
    return None


@functools.lru_cache(maxsize=4)
def load_runtimes(path: Path) -> np.ndarray:
    """The `runtime` column (seconds) as a float array."""
    try:
        with path.open(encoding="utf-8") as handle:
            header = handle.readline().strip()
            if header != "runtime":
                raise ValueError(f"{path.name}: expected a single 'runtime' column")
            values = np.loadtxt(handle, dtype=float, ndmin=1)
    except FileNotFoundError:
        raise ValueError(f"research.runtimes: {path}: no such file") from None
    if values.size == 0:
        raise ValueError(f"{path.name}: no run times")
    return values


def _runtime_path(model: ResearchModel, base: Path) -> Path:
    if model.runtimes is not None:
        return base / model.runtimes
    found = find_shared_file(PHILLY_RUNTIMES, [base, Path.cwd(), Path(__file__).parent])
    if found is None:
        raise ValueError(
            "research.runtimes: philly_runtime.csv not found in ../shared/traces/philly; give "
            "research.runtimes: PATH or set CALDERA_SHARED"
        )
    return found


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
            runtimes = load_runtimes(_runtime_path(kind, base))
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
            load_runtimes(_runtime_path(kind, base)) if isinstance(kind, ResearchModel) else None
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
