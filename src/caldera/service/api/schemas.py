"""The API's request and resource models (its OpenAPI schema), and rows → resources.

Times are ISO 8601 UTC. A job resource carries at least what DESIGN §8 lists.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from caldera.config import CheckpointModel, TopologyModel
from caldera.errors import RequestError
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobType,
    priority_class,
)
from caldera.runtime.requests import RequestRecord, task_shape, topology_spec

__all__ = [
    "AuditOut",
    "CheckpointIn",
    "ClusterOut",
    "EventOut",
    "GPUOut",
    "JobOut",
    "JobRequest",
    "NodeOut",
    "QueueOut",
    "QueuePatch",
    "TaskOut",
    "WhoAmI",
    "audit_out",
    "event_out",
    "iso",
    "job_out",
]


_MAX_SECONDS = 10 * 365 * 86400.0  # durations and checkpoint times: ten years at most
_MAX_MILLICORES = 10**9  # a million cores per task
_MAX_MEMORY_MIB = 2**40  # an exbibyte per task
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def iso(t: float | None) -> str | None:
    """Unix time as ISO 8601 UTC (`2026-11-29T09:36:16.123Z`)."""
    if t is None:
        return None
    text = datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


# -- requests --------------------------------------------------------------------------------


class CheckpointIn(CheckpointModel):
    """`checkpoint:` of a request: the shared model, with times bounded (finite, ten years)."""

    interval: float | None = Field(
        default=None, gt=0, le=_MAX_SECONDS, allow_inf_nan=False,
        description="Seconds between checkpoints",
    )  # fmt: skip
    cost: float = Field(
        default=0.0, ge=0, le=_MAX_SECONDS, allow_inf_nan=False,
        description="Seconds one checkpoint takes",
    )  # fmt: skip


def _printable(value: str, what: str) -> str:
    """No control characters (NUL, escape sequences, newlines): names are printed in
    terminals and stored in databases that refuse NUL."""
    if not value.isprintable():
        raise ValueError(f"{what} must not hold control characters")
    return value


class JobRequest(BaseModel):
    """A submission. GPUs are per task; a fraction (e.g. 0.5) only for a single task.

    Everything is checked here, so that what is accepted can be stored, printed and started:
    numbers are finite and bounded, names printable, no NUL anywhere, environment variable
    names portable. The configured limits (`limits`) are checked by the route."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=255)
    queue: str = Field(min_length=1, max_length=128)
    type: JobType = JobType.NORMAL
    tasks: int = Field(default=1, ge=1, le=4096)
    gpus: float = Field(
        default=1.0, ge=0, le=4096, allow_inf_nan=False, description="GPUs per task"
    )
    min_available: int | None = Field(
        default=None, ge=1, le=4096, description="Gang size (default tasks)"
    )
    cpu: float | str | None = Field(default=None, description="CPU per task: 4 or '500m'")
    memory: int | str | None = Field(default=None, description="Memory per task: '16Gi' or MiB")
    command: list[str] = Field(min_length=1, description="argv of each task")
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(
        default=None, max_length=4096, description="Working directory of the tasks"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    topology: TopologyModel | None = None
    expected_duration: float | None = Field(
        default=None, gt=0, le=_MAX_SECONDS, allow_inf_nan=False, description="Seconds"
    )
    checkpoint: CheckpointIn | None = None
    max_retries: int = Field(default=0, ge=0, le=100)
    gpu_model: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None, max_length=64
    )
    gpu_profile: str | None = Field(
        default=None,
        max_length=64,
        description="One MIG slice of this profile per task, e.g. 1g.10gb",
    )

    @field_validator("name", "queue", "gpu_profile")
    @classmethod
    def _names(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else _printable(value, info.field_name or "name")

    @field_validator("gpu_model")
    @classmethod
    def _models(cls, value: list[str] | None) -> list[str] | None:
        for model in value or ():
            _printable(model, "gpu_model")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the program name is empty")
        for index, argument in enumerate(value):
            if "\0" in argument:
                raise ValueError(f"argument {index} holds a NUL character")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"invalid variable name {name[:64]!r} (letters, digits and _, "
                    "not starting with a digit)"
                )
            if "\0" in text:
                raise ValueError(f"the value of {name} holds a NUL character")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not key:
                raise ValueError("a label key is empty")
            _printable(key, f"label key {key[:64]!r}")
            _printable(text, f"label {key[:64]!r}")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is not None and "\0" in value:
            raise ValueError("holds a NUL character")
        return value

    def record(self) -> RequestRecord:
        """The request as the service keeps it (`caldera.runtime.requests.RequestRecord`):
        units resolved, defaults filled. Raises RequestError."""
        try:
            shape = task_shape(
                self.tasks,
                self.gpus,
                self.min_available,
                self.cpu,
                self.memory,
                gpu_profile=self.gpu_profile,
                gpus_given="gpus" in self.model_fields_set,
            )
        except OverflowError:
            raise RequestError("cpu or memory: more than any host has") from None
        if shape.cpu > _MAX_MILLICORES:
            raise RequestError(f"cpu: {self.cpu!r} is more than any host has")
        if shape.memory > _MAX_MEMORY_MIB:
            raise RequestError(f"memory: {self.memory!r} is more than any host has")
        if self.workdir is not None and not Path(self.workdir).is_absolute():
            raise RequestError("workdir must be an absolute path")
        checkpoint = self.checkpoint or CheckpointIn()
        topology = self.topology
        return RequestRecord(
            name=self.name or _default_name(self.command[0]),
            queue=self.queue,
            type=self.type,
            tasks=shape.tasks,
            gpu=shape.gpu,
            cpu=shape.cpu,
            memory=shape.memory,
            min_available=shape.min_available,
            command=tuple(self.command),
            env=self.env,
            workdir=self.workdir,
            labels=self.labels,
            topology=topology_spec(topology.model_dump()) if topology else None,
            expected_duration=self.expected_duration,
            checkpoint=Checkpointing(checkpoint.interval, checkpoint.cost, checkpoint.on_sigterm),
            max_retries=self.max_retries,
            gpu_models=tuple(self.gpu_model) if self.gpu_model is not None else None,
            gpu_profile=self.gpu_profile,
        )

    def normalised(self) -> dict[str, Any]:
        """The stored request: `record()`'s wire form. Raises RequestError."""
        return self.record().to_wire()


def _default_name(program: str) -> str:
    """The program's base name, made printable (the name of a job submitted without one)."""
    base = program.rsplit("/", 1)[-1][:64] or "job"
    return "".join(c if c.isprintable() else "?" for c in base)


class QueuePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: Literal["Open", "Closing", "Closed"]


# -- resources -------------------------------------------------------------------------------


class TaskOut(BaseModel):
    rank: int
    node: str
    devices: list[int]
    gpu: float
    pid: int | None
    state: Literal["running", "releasing", "exited"]
    exit_code: int | None


class JobOut(BaseModel):
    """A job resource (DESIGN §8). Times are ISO 8601 UTC; `start_time` is the first start."""

    id: str
    name: str
    user: str
    queue: str
    type: str
    priority_class: str
    state: str
    submit_time: str
    start_time: str | None
    end_time: str | None
    last_start_time: str | None
    evictions: int
    exit_code: int | None
    tasks: int
    gpus_per_task: float
    # N: each task is one of N time-sharing a GPU, no memory isolation (docs/gpus.md); 0: not
    time_shared: int = 0
    gpu_profile: str | None = None  # each task on one MIG slice of this profile
    min_available: int
    command: list[str]
    labels: dict[str, str]
    hold_reason: str | None
    reason: str | None
    attempts: int
    retries: int
    lost_gpu_seconds: float
    checkpoint_step: int | None
    progress: float | None
    placement: list[TaskOut]


class AuditOut(BaseModel):
    """One state-changing request: who, from where, what, and how it ended."""

    id: int
    time: str
    user: str | None
    client: str | None
    method: str
    path: str
    action: str
    target: str | None
    status: int
    detail: dict[str, Any]


def audit_out(row: dict[str, Any]) -> AuditOut:
    return AuditOut(
        id=row["id"],
        time=iso(row["t"]) or "",
        user=row["user"],
        client=row["client"],
        method=row["method"],
        path=row["path"],
        action=row["action"],
        target=row["target"],
        status=row["status"],
        detail=row["detail"] or {},
    )


class EventOut(BaseModel):
    id: int
    time: str
    kind: str
    job: str | None
    data: dict[str, Any]


class QueueOut(BaseModel):
    name: str
    state: str
    weight: int
    deserved_gpus: float | None
    guarantee_gpus: float | None
    capability_gpus: float | None
    reclaimable: bool
    allocated_gpus: float
    pending: int
    held: int
    running: int
    throttled_for: str | None
    parent: str | None = None  # the department above the queue (DESIGN §2 "Hierarchy")


class GPUOut(BaseModel):
    index: int
    free: float
    jobs: list[str]
    uuid: str | None = None  # what CUDA_VISIBLE_DEVICES names (None: a virtual GPU)
    drained: str | None = None  # why the GPU takes no new work (docs/gpus.md), None: healthy
    profile: str | None = None  # a MIG slice's profile (1g.10gb); None: a whole GPU


class NodeOut(BaseModel):
    name: str
    gpu_model: str
    gpus: list[GPUOut]


class ClusterOut(BaseModel):
    gpus: int
    gpus_allocated: float
    nodes: list[NodeOut]
    throttles: dict[str, str]
    jobs: dict[str, int]


class WhoAmI(BaseModel):
    user: str
    queues: list[str]
    critical: bool
    admin: bool
    protect: bool = False
    trust_progress: bool = False


def job_out(row: dict[str, Any], node_names: list[str]) -> JobOut:
    """A stored job row as the API shows it."""
    request = row["request"]
    placement: list[TaskOut] = []
    for task in row["tasks"] or []:
        where = task["placement"]
        state: Literal["running", "releasing", "exited"] = (
            "exited" if task.get("done") else ("releasing" if task.get("leaving") else "running")
        )
        node = int(where["node"])
        placement.append(
            TaskOut(
                rank=task["rank"],
                node=node_names[node] if node < len(node_names) else str(node),
                devices=list(where["devices"]),
                gpu=where["milli"] * len(where["devices"]) / GPU_MILLI,
                pid=task.get("pid"),
                state=state,
                exit_code=task.get("exit_code"),
            )
        )
    progress = row["reported_progress"]
    return JobOut(
        id=row["id"],
        name=row["name"],
        user=row["user"],
        queue=row["queue"],
        type=row["type"],
        priority_class=priority_class(JobType(row["type"])).name,
        state=row["state"],
        submit_time=iso(row["submit_time"]) or "",
        start_time=iso(row["first_start"]),
        end_time=iso(row["end_time"]),
        last_start_time=iso(row["start_time"]),
        evictions=row["evictions"],
        exit_code=row["exit_code"],
        tasks=request["tasks"],
        gpus_per_task=request["gpu"] / GPU_MILLI,
        time_shared=int(request.get("time_shared", 0)),
        gpu_profile=request.get("gpu_profile"),
        min_available=request.get("min_available") or request["tasks"],
        command=list(request["command"]),
        labels=dict(request.get("labels") or {}),
        hold_reason=row["hold_reason"],
        reason=row["reason"],
        attempts=row["attempts"],
        retries=row["retries"],
        lost_gpu_seconds=round(row["lost_gpu_seconds"], 3),
        checkpoint_step=row["checkpoint_step"],
        progress=progress if progress is None or math.isfinite(progress) else None,
        placement=placement,
    )


def event_out(row: dict[str, Any]) -> EventOut:
    return EventOut(
        id=row["id"], time=iso(row["t"]) or "", kind=row["kind"], job=row["job"], data=row["data"]
    )
