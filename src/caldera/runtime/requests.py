"""One request path: what a job asks for, as one typed record with one wire form.

Every way of asking for a job ends in a `RequestRecord`: a REST submission
(`caldera.service.api.schemas.JobRequest.record`, which the CLI's `submit` sends), a scenario's
job (`caldera.sim.scenario.job_spec_from_model`) and a Kubernetes TrainingJob
(`caldera.k8s.reading.trainingjob`). Each front end keeps its own key names — they are contracts:
the REST body says `gpus`, a scenario `gpus_per_task`, a TrainingJob `minAvailable` — and
resolves them into the record's units (milli-GPUs, millicores and MiB per task). From there
on a request is one thing:

- its wire form is `to_wire()` / `from_wire()`: the JSON the service stores with each job
  (`jobs.request`) and rebuilds a restarted job from, keys as the service has always stored
  them (extended, never renamed; a key an older row lacks takes its default);
- `RequestRecord.spec(id, submit, user)` is the one place a request becomes the cycle's
  `JobSpec`, in the simulator, the service and the controller alike.

The REST body and a scenario job share their resolution too (`resolve_tasks`: GPU fractions,
CPU and memory quantities, the gang size, the fractional-GPU rule as `caldera.model.jobs`
defines it). A TrainingJob reads its pod templates the Kubernetes way (quantities as
Kubernetes parses them, the GPU resource's limit) and asks the same fractional-GPU rule
(`breaks_fractional_gpu_rule`) before it builds its record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from caldera.errors import RequestError
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobSpec,
    JobType,
    TopologyMode,
    TopologySpec,
    parse_cpu,
    parse_gpu_milli,
    parse_memory_mib,
    slice_milli,
)
from caldera.model.jobs import breaks_fractional_gpu_rule

__all__ = [
    "RequestRecord",
    "TaskShape",
    "resolve_tasks",
    "task_shape",
    "topology_spec",
]

Quantity = float | int | str
_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What a job asks for, resolved: per task `gpu` milli-GPUs (or one `gpu_profile` MIG
    slice), `cpu` millicores and `memory` MiB; a gang of `tasks`, `min_available` of them
    needed to start (0: all). Who asked, the job's id and its submit time are not part of
    it: `spec` takes them.

    `time_shared` N: each task is one of N sharing a GPU (a time-sharing queue's doing,
    `caldera.model.time_share`, kept so that a restart rebuilds the same spec). `command`,
    `env`, `workdir` and `trust_progress` are the service's (what a task runs; whether the
    job's own progress claims defend it); `duration` the simulator's (the useful work)."""

    name: str
    queue: str
    type: JobType = JobType.NORMAL
    tasks: int = 1
    gpu: int = GPU_MILLI
    cpu: int = 0
    memory: int = 0
    min_available: int = 0
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    namespace: str = "default"
    priority_class_name: str = ""
    checkpoint: Checkpointing = field(default_factory=Checkpointing)
    expected_duration: float | None = None
    topology: TopologySpec | None = None
    gpu_models: tuple[str, ...] | None = None
    max_retries: int = 0
    time_shared: int = 0
    gpu_profile: str | None = None
    duration: float | None = None
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    workdir: str | None = None
    trust_progress: bool = False

    def __post_init__(self) -> None:
        # Frozen all the way down: a record is shared by a job's spec, its row and its tasks.
        for name in ("labels", "env"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))
        if not isinstance(self.command, tuple):
            object.__setattr__(self, "command", tuple(self.command))
        if self.gpu_models is not None and not isinstance(self.gpu_models, tuple):
            object.__setattr__(self, "gpu_models", tuple(self.gpu_models))

    def spec(self, id: str, submit: float, user: str = "") -> JobSpec:
        """The cycle's view of this request, accepted as job `id` at `submit` for `user`:
        the one conversion every runtime uses. ValueError if `JobSpec` refuses it."""
        return JobSpec(
            id=id,
            name=self.name,
            queue=self.queue,
            type=self.type,
            submit=submit,
            tasks=self.tasks,
            gpu=self.gpu,
            cpu=self.cpu,
            memory=self.memory,
            min_available=self.min_available,
            labels=self.labels,
            namespace=self.namespace,
            priority_class_name=self.priority_class_name,
            checkpoint=self.checkpoint,
            expected_duration=self.expected_duration,
            topology=self.topology,
            gpu_models=frozenset(self.gpu_models) if self.gpu_models else None,
            duration=self.duration,
            max_retries=self.max_retries,
            user=user,
            time_shared=self.time_shared,
            gpu_profile=self.gpu_profile,
        )

    def to_wire(self) -> dict[str, Any]:
        """The record as JSON-able data: the one wire form (the service's stored request)."""
        checkpoint = self.checkpoint
        topology = self.topology
        return {
            "name": self.name,
            "queue": self.queue,
            "type": self.type.value,
            "tasks": self.tasks,
            "gpu": self.gpu,
            "cpu": self.cpu,
            "memory": self.memory,
            "min_available": self.min_available,
            "command": list(self.command),
            "env": dict(self.env),
            "workdir": self.workdir,
            "labels": dict(self.labels),
            "topology": (
                {"mode": topology.mode.value, "highest_tier": topology.highest_tier}
                if topology is not None
                else None
            ),
            "expected_duration": self.expected_duration,
            "checkpoint": {
                "interval": checkpoint.interval,
                "cost": checkpoint.cost,
                "on_sigterm": checkpoint.on_sigterm,
            },
            "max_retries": self.max_retries,
            "gpu_model": list(self.gpu_models) if self.gpu_models is not None else None,
            "gpu_profile": self.gpu_profile,
            "time_shared": self.time_shared,
            "trust_progress": self.trust_progress,
            "namespace": self.namespace,
            "priority_class_name": self.priority_class_name,
            "duration": self.duration,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> RequestRecord:
        """A record from its wire form. `name`, `queue`, `type`, `tasks` and `gpu` are
        required; every other key may be missing (rows stored before it existed)."""
        checkpoint = data.get("checkpoint") or {}
        tasks = int(data["tasks"])
        models = data.get("gpu_model")
        return cls(
            name=str(data["name"]),
            queue=str(data["queue"]),
            type=JobType(data["type"]),
            tasks=tasks,
            gpu=int(data["gpu"]),
            cpu=int(data.get("cpu") or 0),
            memory=int(data.get("memory") or 0),
            min_available=int(data.get("min_available") or 0),
            labels=data.get("labels") or {},
            namespace=str(data.get("namespace") or "default"),
            priority_class_name=str(data.get("priority_class_name") or ""),
            checkpoint=Checkpointing(
                checkpoint.get("interval"),
                float(checkpoint.get("cost", 0.0)),
                bool(checkpoint.get("on_sigterm", True)),
            ),
            expected_duration=data.get("expected_duration"),
            topology=topology_spec(data.get("topology")),
            gpu_models=tuple([models] if isinstance(models, str) else models) if models else None,
            max_retries=int(data.get("max_retries", 0)),
            time_shared=int(data.get("time_shared", 0)),
            gpu_profile=data.get("gpu_profile"),
            duration=data.get("duration"),
            command=tuple(data.get("command") or ()),
            env=data.get("env") or {},
            workdir=data.get("workdir"),
            trust_progress=bool(data.get("trust_progress", False)),
        )

    def shared_as(self, spec: JobSpec) -> RequestRecord:
        """This record as `spec` took it up after a time-sharing queue made it 1/N of a GPU
        (`caldera.model.time_share`): kept in the record, a restart rebuilds the same spec."""
        if spec.gpu == self.gpu and spec.time_shared == self.time_shared:
            return self
        return replace(self, gpu=spec.gpu, time_shared=spec.time_shared)


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What each task asks for, and the gang: milli-GPUs, millicores, MiB per task."""

    tasks: int
    gpu: int
    cpu: int
    memory: int
    min_available: int


def resolve_tasks(
    tasks: int,
    gpus: float,
    min_available: int | None = None,
    cpu: Quantity | None = None,
    memory: Quantity | None = None,
    gpu_profile: str | None = None,
    gpus_given: bool = False,
    gpus_key: str = "gpus",
) -> tuple[TaskShape, list[str]]:
    """The shape of a request and what is wrong with it (nothing: an empty list). A part that
    is wrong falls back to a harmless value (1 GPU, no CPU or memory, a gang of `tasks`), so
    a caller that records problems instead of raising still gets a shape. `gpu_profile`: one
    MIG slice of that profile per task instead of `gpus` (`gpus_given`: both were asked).
    `gpus_key`: what the caller's request calls the GPUs per task, for the messages."""
    problems: list[str] = []
    gang = min_available or tasks
    if gang > tasks:
        problems.append(f"min_available ({gang}) exceeds tasks ({tasks})")
        gang = tasks
    try:
        gpu = parse_gpu_milli(gpus)
    except ValueError as error:
        problems.append(str(error))
        gpu = GPU_MILLI
    if gpu_profile is not None:
        if gpus_given:
            problems.append(f"give gpu_profile or {gpus_key}, not both")
        try:
            gpu = slice_milli(gpu_profile)  # a slice is its GPU-equivalent, for any gang
        except ValueError as error:
            problems.append(str(error))
    elif breaks_fractional_gpu_rule(gpu, tasks):
        problems.append(f"fractional {gpus_key} need tasks: 1 (a GPU share is for one task)")
        gpu = GPU_MILLI
    try:
        millicores = parse_cpu(cpu) if cpu is not None else 0
        mib = parse_memory_mib(memory) if memory is not None else 0
    except ValueError as error:
        problems.append(str(error))
        millicores = mib = 0
    return TaskShape(tasks, gpu, millicores, mib, gang), problems


def task_shape(
    tasks: int,
    gpus: float,
    min_available: int | None = None,
    cpu: Quantity | None = None,
    memory: Quantity | None = None,
    gpu_profile: str | None = None,
    gpus_given: bool = False,
) -> TaskShape:
    """The shape of a request; RequestError (its first problem, one line) if it is wrong."""
    shape, problems = resolve_tasks(
        tasks, gpus, min_available, cpu, memory, gpu_profile, gpus_given
    )
    if problems:
        raise RequestError(problems[0])
    return shape


def topology_spec(topology: Mapping[str, object] | None) -> TopologySpec | None:
    """`{mode: hard|soft, highest_tier: 1|2}` (validated by the caller's schema)."""
    if not topology:
        return None
    return TopologySpec(TopologyMode(str(topology["mode"])), int(str(topology["highest_tier"])))
