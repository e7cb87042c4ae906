"""The configuration schema every runtime reads (DESIGN §6, §8), as pydantic models.

A queue or a policy means the same thing in a scenario file, the service's configuration and
the Kubernetes controller's: all three validate it with these models. Structural problems are
pydantic errors; `caldera.config.build` turns the models into the domain's objects.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from caldera.model import MAX_TIME_SHARING, parse_cpu, parse_memory_mib

__all__ = [
    "CheckpointModel",
    "ConfigFileModel",
    "DeploymentModel",
    "Number",
    "PolicyModel",
    "Quantity",
    "QueueModel",
    "QuotaModel",
    "StrictModel",
    "TimeWindowModel",
    "TokenModel",
    "TopologyModel",
]

Number = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Quantity = float | int | str


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


class QuotaModel(StrictModel):
    gpu: Number | None = None
    cpu: Quantity | None = None
    memory: Quantity | None = None

    @field_validator("cpu")
    @classmethod
    def _cpu_quantity(cls, value: Quantity | None) -> Quantity | None:
        if value is not None:
            parse_cpu(value)  # raises a ValueError naming the quantity; pydantic adds where
        return value

    @field_validator("memory")
    @classmethod
    def _memory_quantity(cls, value: Quantity | None) -> Quantity | None:
        if value is not None:
            parse_memory_mib(value)
        return value


class TimeWindowModel(StrictModel):
    days: list[Annotated[int, Field(ge=1, le=7)]] = Field(default=[1, 2, 3, 4, 5, 6, 7])
    hours: tuple[Annotated[float, Field(ge=0, le=24)], Annotated[float, Field(ge=0, le=24)]] = (
        0,
        24,
    )


class QueueModel(StrictModel):
    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=0)
    deserved: QuotaModel | None = None
    guarantee: QuotaModel | None = None
    capability: QuotaModel | None = None
    reclaimable: bool = True
    state: Literal["Open", "Closing", "Closed"] = "Open"
    time_windows: list[TimeWindowModel] = Field(default_factory=list)
    critical_allowed: bool = True  # may jobs of type critical be submitted here?
    # N >= 2: single-task 1-GPU jobs time-share a GPU N ways, no memory isolation (docs/gpus.md)
    time_sharing: int = Field(default=0, ge=0, le=MAX_TIME_SHARING)
    # A department above this queue (DESIGN §2 "Hierarchy"); it holds no jobs itself.
    parent: str | None = Field(default=None, min_length=1)


class FairShareModel(StrictModel):
    """Fair share over time (DESIGN §2): each queue's GPU usage decays with this half-life
    (seconds) and orders the lending of idle room beyond deserved shares; absent: off."""

    half_life: float = Field(gt=0, allow_inf_nan=False)


class PolicyModel(StrictModel):
    name: str = "caldera"
    grace_period: Number | None = None
    throttle_timeout: Number | None = None
    cooldown: Number | None = None
    eviction_budget: Annotated[float, Field(gt=0, le=1)] | None = None
    alpha: Number | None = None
    beta: Number | None = None
    emergency_checkpoint: bool | None = None
    throttle: bool | None = None
    nomination_timeout: Number | None = None
    preempt_backoff: Number | None = None
    weight_band: Number | None = None
    lossy_patience: Number | None = None
    checkpoint_wait: Number | None = None
    planned_backfill: bool | None = None
    reclaim_whole_nodes: bool | None = None
    keep_leaves_whole: bool | None = None
    pack_with_victims: bool | None = None
    ceiling: Annotated[int, Field(ge=0)] | None = None
    slo: dict[str, Number | None] | None = None
    fair_share: FairShareModel | None = None


class TopologyModel(StrictModel):
    mode: Literal["hard", "soft"] = "soft"
    highest_tier: Literal[1, 2] = 1


class CheckpointModel(StrictModel):
    """How a job checkpoints (a request's `checkpoint:`; a scenario job's checkpoint_* keys)."""

    interval: float | None = Field(default=None, gt=0, description="Seconds between checkpoints")
    cost: float = Field(default=0.0, ge=0, description="Seconds one checkpoint takes")
    on_sigterm: bool = Field(default=True, description="Writes an emergency checkpoint on SIGTERM")


class TokenModel(StrictModel):
    """A bearer token: who it names, the queues it may submit to (`"*"`: all), whether it may
    submit `critical` jobs, set protection labels (`protect`), have its jobs' own progress
    claims defend them (`trust_progress`), and whether it is an admin."""

    token: str = Field(min_length=8)
    user: str = Field(min_length=1, max_length=128)
    queues: list[str] = Field(default_factory=lambda: ["*"])
    critical: bool = False
    admin: bool = False
    protect: bool = False
    trust_progress: bool = False


class DeploymentModel(StrictModel):
    """The parts of a configuration file every long-running runtime reads (DESIGN §8)."""

    queues: list[QueueModel] = Field(default_factory=list)
    tokens: list[TokenModel] = Field(default_factory=list)
    policy: PolicyModel = Field(default_factory=PolicyModel)


class ConfigFileModel(DeploymentModel):
    """The whole configuration file `caldera serve` and `caldera k8s run` read (DESIGN §8).
    `poll_interval`, `cycle_gap`, `gpu_health`, `isolation`, `logs` and `limits` are the local
    service's; the controller accepts and ignores them (its own settings are under
    `kubernetes:`)."""

    # Seconds between two looks at the running processes and the SDK's status files.
    poll_interval: float = Field(default=0.1, gt=0, le=10)
    # Least seconds between two cycles triggered by submissions (bursts share one cycle).
    cycle_gap: float = Field(default=0.05, ge=0, le=10)
    # Polling this host's GPUs for XID/ECC errors, heat and lost devices (docs/gpus.md); its
    # keys are checked by the service (`caldera.service.gpus.watch.GpuHealthModel`).
    gpu_health: dict[str, Any] = Field(default_factory=dict)
    # Who jobs run as, how their processes are tracked (`caldera.service.isolation`), task log
    # bounds and admission limits (`caldera.service.limits`): checked by the service.
    isolation: dict[str, Any] = Field(default_factory=dict)
    logs: dict[str, Any] = Field(default_factory=dict)
    limits: dict[str, Any] = Field(default_factory=dict)
