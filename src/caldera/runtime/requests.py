"""One request → `JobSpec` path for scenario jobs and REST submissions.

Two ways of asking for a job come through here, each with its own key names: a scenario's
job (`caldera.sim.scenario`) and a REST submission (`caldera.service.api.schemas` checks its
shape with `task_shape`, `caldera.service.jobs.spec_from_request` builds its spec). Both
resolve their resources here (`resolve_tasks`: GPU fractions, CPU and memory quantities, the
gang size, the fractional-GPU rule as `caldera.model.jobs` defines it) and build the spec
here (`job_spec`), so one request means the same job to the simulator and the service.

A Kubernetes TrainingJob does not: `caldera.k8s.trainingjob` reads its pod templates the
Kubernetes way (quantities as Kubernetes parses them, the GPU resource's limit) and builds
its `JobSpec` itself; it asks the same fractional-GPU rule (`breaks_fractional_gpu_rule`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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

__all__ = ["TaskShape", "job_spec", "resolve_tasks", "task_shape", "topology_spec"]

Quantity = float | int | str


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


def job_spec(
    *,
    id: str,
    name: str,
    queue: str,
    type: JobType,
    submit: float,
    shape: TaskShape,
    checkpoint: Checkpointing,
    labels: Mapping[str, str] | None = None,
    namespace: str = "default",
    priority_class_name: str = "",
    expected_duration: float | None = None,
    topology: TopologySpec | None = None,
    gpu_model: str | list[str] | None = None,
    duration: float | None = None,
    max_retries: int = 0,
    user: str = "",
    time_shared: int = 0,
    gpu_profile: str | None = None,
) -> JobSpec:
    """The cycle's view of a request whose shape is resolved."""
    models = [gpu_model] if isinstance(gpu_model, str) else gpu_model
    return JobSpec(
        id=id,
        name=name,
        queue=queue,
        type=type,
        submit=submit,
        tasks=shape.tasks,
        gpu=shape.gpu,
        cpu=shape.cpu,
        memory=shape.memory,
        min_available=shape.min_available,
        labels=dict(labels or {}),
        namespace=namespace,
        priority_class_name=priority_class_name,
        checkpoint=checkpoint,
        expected_duration=expected_duration,
        topology=topology,
        gpu_models=frozenset(models) if models else None,
        duration=duration,
        max_retries=max_retries,
        user=user,
        time_shared=time_shared,
        gpu_profile=gpu_profile,
    )
