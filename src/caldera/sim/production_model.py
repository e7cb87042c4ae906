"""The parameters of `kind: production` (caldera.sim.production): what a scenario file may set,
validated, with the seeds' defaults for every kind of work.

Apart from the generator because they change for another reason: a new knob or a new default
is a change to the scenario format, a new way of drawing jobs is a change to the generator.
`offered_load` and the tests read these models without drawing anything.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from caldera.model import JobType, parse_profile
from caldera.sim.scenario import MigModel

__all__ = ["KindModel", "ProductionModel", "ResearchModel"]

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
