"""Scenario files (DESIGN §6): YAML or JSON, validated with pydantic, expanded into the model.

Structural problems (bad YAML, a missing or mistyped key, an unknown job type, a duplicate
name) make the whole file invalid: `ScenarioError` with one line naming the field. A job that
is well-formed but cannot be accepted (unknown or Closed queue, `min_available` above `tasks`,
a request no node can host) is not a file error: it is submitted and gets a `reject` event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from caldera.config import (
    Number,
    PolicyModel,
    Quantity,
    QueueModel,
    Scenario,
    StrictModel,
    Submission,
    TopologyModel,
    build_queue,
    policy_config,
)
from caldera.errors import ScenarioError
from caldera.model import (
    Checkpointing,
    JobType,
    NodeGroup,
    expand_node_groups,
    parse_cpu,
    parse_memory_mib,
    parse_profile,
    time_share,
)
from caldera.model.queues import departments, tree_problem
from caldera.runtime.requests import RequestRecord, resolve_tasks, topology_spec

__all__ = [
    "JobModel",
    "MigModel",
    "ScenarioError",
    "ScenarioModel",
    "job_spec_from_model",
    "load_scenario",
    "mig_layouts",
    "parse_scenario",
    "request_record",
]


def _check_profile(value: str | None) -> str | None:
    if value is not None:
        parse_profile(value)
    return value


class MigModel(StrictModel):
    """`gpus` of a group's GPUs in MIG mode, each split into `slices` (profile → count)."""

    gpus: int = Field(ge=1)
    slices: dict[str, Annotated[int, Field(ge=1)]] = Field(min_length=1)

    @field_validator("slices")
    @classmethod
    def _profiles(cls, value: dict[str, int]) -> dict[str, int]:
        for profile in value:
            parse_profile(profile)  # a ValueError naming the profile; pydantic adds where
        return value


def mig_layouts(models: Iterable[MigModel]) -> tuple[tuple[str, ...], ...]:
    """The MIG GPUs of a node group, each as its slices' profiles (NodeGroup.mig)."""
    return tuple(
        tuple(p for p, n in layout.slices.items() for _ in range(n))
        for layout in models
        for _ in range(layout.gpus)
    )


class NodeGroupModel(StrictModel):
    prefix: str = Field(min_length=1)
    count: int = Field(ge=1)
    gpus: int = Field(ge=0)
    gpu_model: str = "GPU"
    cpu: Quantity = 128
    memory: Quantity = "1024Gi"
    nvlink_island: int = Field(default=0, ge=0)
    nodes_per_tier1: int = Field(default=0, ge=0)
    tier1_per_tier2: int = Field(default=0, ge=0)
    gpu_memory: Quantity | None = None
    mig: list[MigModel] = Field(default_factory=list)  # GPUs in MIG mode (docs/gpus.md)


class ClusterModel(StrictModel):
    nodes: list[NodeGroupModel] = Field(min_length=1)


class JobModel(StrictModel):
    name: str = Field(min_length=1)
    queue: str
    type: JobType
    submit: Number
    duration: Number
    tasks: int = Field(default=1, ge=1)
    gpus_per_task: Number = 1
    min_available: int | None = Field(default=None, ge=1)
    checkpoint_interval: Annotated[float, Field(gt=0)] | None = None
    checkpoint_cost: Number = 0
    checkpoint_on_sigterm: bool = True
    expected_duration: Annotated[float, Field(gt=0)] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    topology: TopologyModel | None = None
    gpu_model: str | list[str] | None = None
    namespace: str = "default"
    priority_class: str = ""
    cpu_per_task: Quantity = 0
    memory_per_task: Quantity = 0
    max_retries: int = Field(default=0, ge=0)
    cancel_at: Number | None = None  # extension: the user cancels the job at this time
    user: str = ""
    gpu_profile: str | None = None  # one MIG slice of this profile per task (docs/gpus.md)

    @field_validator("gpu_profile")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        return _check_profile(value)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_as_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                str(k): (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in value.items()
            }
        return value


class StreamModel(StrictModel):
    """`count` copies of one job, `every` seconds apart from `start`: names NAME0, NAME1, …"""

    kind: Literal["stream"]
    name: str = Field(min_length=1)
    queue: str
    type: JobType
    start: Number = 0
    every: Number
    count: int = Field(ge=0)
    duration: Number
    tasks: int = Field(default=1, ge=1)
    gpus_per_task: Number = 1
    min_available: int | None = Field(default=None, ge=1)
    checkpoint_interval: Annotated[float, Field(gt=0)] | None = None
    checkpoint_cost: Number = 0
    checkpoint_on_sigterm: bool = True
    expected_duration: Annotated[float, Field(gt=0)] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    topology: TopologyModel | None = None
    gpu_model: str | list[str] | None = None
    namespace: str = "default"
    cpu_per_task: Quantity = 0
    memory_per_task: Quantity = 0
    gpu_profile: str | None = None

    @field_validator("gpu_profile")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        return _check_profile(value)


class OtherGeneratorModel(BaseModel):
    """Generators defined elsewhere (`production`, …): parameters checked by their module."""

    model_config = ConfigDict(extra="allow")
    kind: str


class TraceMigModel(StrictModel):
    """The first `nodes` trace nodes of GPU model `model` carry GPUs in MIG mode, as `layout`."""

    model: str = Field(min_length=1)
    nodes: int = Field(ge=1)
    layout: list[MigModel] = Field(min_length=1)


class TraceModel(StrictModel):
    """`workload.trace`: a real cluster trace replayed as jobs (see `caldera.sim.openb`).

    `nodes` and `pods` (and `times`) are paths relative to the scenario file. Without `nodes`
    the scenario's own `cluster` hosts the pods.
    """

    format: Literal["openb"]
    nodes: str | None = None
    pods: str
    times: str | None = None  # pod list whose creation/deletion times a timeless list borrows
    limit: int | None = Field(default=None, ge=1)
    qos_map: dict[str, JobType] | None = None
    queue: str | None = None
    time_scale: Annotated[float, Field(gt=0)] = 1.0
    cpu_only: Literal["include", "skip"] = "include"
    nodes_per_tier1: int = Field(default=8, ge=0)
    tier1_per_tier2: int = Field(default=0, ge=0)
    checkpoint_interval: Annotated[float, Field(gt=0)] | None = None
    checkpoint_cost: Number = 0
    checkpoint_on_sigterm: bool = False
    expected_duration: bool = False
    seed: int = 0
    mig: list[TraceMigModel] = Field(default_factory=list)  # MIG nodes (caldera.sim.openb)
    share_profiles: bool = False  # GPU-share pods ask for the smallest MIG slice that holds them


class WorkloadModel(StrictModel):
    generators: list[StreamModel | OtherGeneratorModel] = Field(default_factory=list)
    trace: TraceModel | None = None
    # Seconds at the start that the metrics leave out (a pool filling up from empty): jobs
    # submitted before it, evictions and GPU time before it do not count.
    warmup: Number = 0


class ScenarioModel(StrictModel):
    cluster: ClusterModel | None = None
    queues: list[QueueModel] = Field(default_factory=list)
    policy: PolicyModel = Field(default_factory=PolicyModel)
    jobs: list[JobModel] = Field(default_factory=list)
    workload: WorkloadModel | None = None
    until: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    name: str | None = None
    description: str | None = None


def job_spec_from_model(model: JobModel | StreamModel, name: str, submit: float) -> Submission:
    """Build the spec; a request that cannot be accepted keeps its reasons in `invalid`."""
    record, problems = request_record(model, name)
    cancel = getattr(model, "cancel_at", None)
    spec = record.spec(name, submit, getattr(model, "user", ""))
    return Submission(spec, "; ".join(problems) or None, cancel)


def request_record(model: JobModel | StreamModel, name: str) -> tuple[RequestRecord, list[str]]:
    """A scenario job's request (`caldera.runtime.requests.RequestRecord`, the record every
    front end builds) and what is wrong with it: the file's keys (`gpus_per_task`,
    `cpu_per_task`, `checkpoint_interval`, …) resolved as a REST submission's are."""
    profile = getattr(model, "gpu_profile", None)
    shape, problems = resolve_tasks(
        model.tasks,
        model.gpus_per_task,
        model.min_available,
        model.cpu_per_task,
        model.memory_per_task,
        gpu_profile=profile,
        gpus_given="gpus_per_task" in model.model_fields_set,
        gpus_key="gpus_per_task",
    )
    models = model.gpu_model
    record = RequestRecord(
        name=name,
        queue=model.queue,
        type=model.type,
        tasks=shape.tasks,
        gpu=shape.gpu,
        cpu=shape.cpu,
        memory=shape.memory,
        min_available=shape.min_available,
        labels=model.labels,
        namespace=model.namespace,
        priority_class_name=getattr(model, "priority_class", ""),
        checkpoint=Checkpointing(
            model.checkpoint_interval, model.checkpoint_cost, model.checkpoint_on_sigterm
        ),
        expected_duration=model.expected_duration,
        topology=topology_spec(model.topology.model_dump() if model.topology else None),
        gpu_models=(models,) if isinstance(models, str) else (tuple(models) if models else None),
        duration=model.duration,
        max_retries=getattr(model, "max_retries", 0),
        gpu_profile=profile,
    )
    return record, problems


def _expand_stream(model: StreamModel) -> Iterable[Submission]:
    for i in range(model.count):
        yield job_spec_from_model(model, f"{model.name}{i}", model.start + i * model.every)


# -- loading ------------------------------------------------------------------------------


def _location(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in {"StreamModel", "OtherGeneratorModel"} or str(part).startswith(
            ("tuple[", "list[", "function-")
        ):
            continue
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = _location(tuple(first["loc"]))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    if first["type"] == "enum":
        allowed = first.get("ctx", {}).get("expected", "")
        message = f"must be one of {allowed}" if allowed else message
    more = len(error.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {message}{suffix}"


def parse_scenario(data: Any, base_dir: Path | None = None, name: str = "scenario") -> Scenario:
    """Validate a decoded scenario document and expand it."""
    if not isinstance(data, dict):
        raise ScenarioError("a scenario must be a mapping with cluster, queues and jobs")
    try:
        model = ScenarioModel.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(_one_line(error)) from None
    base = base_dir or Path.cwd()
    try:
        return _expand(model, base, name)
    except (ValueError, LookupError, OSError) as error:
        message = error.args[0] if isinstance(error, LookupError) and error.args else str(error)
        raise ScenarioError(str(message).splitlines()[0]) from None


def _expand(model: ScenarioModel, base: Path, name: str) -> Scenario:
    from caldera.sim import generators, trace  # late: they import this module

    groups: list[NodeGroup] = []
    if model.cluster is not None:
        for i, group in enumerate(model.cluster.nodes):
            try:
                groups.append(
                    NodeGroup(
                        prefix=group.prefix,
                        count=group.count,
                        gpus=group.gpus,
                        gpu_model=group.gpu_model,
                        cpu=parse_cpu(group.cpu),
                        memory=parse_memory_mib(group.memory),
                        nvlink_island=group.nvlink_island,
                        nodes_per_tier1=group.nodes_per_tier1,
                        tier1_per_tier2=group.tier1_per_tier2,
                        gpu_memory=parse_memory_mib(group.gpu_memory) if group.gpu_memory else 0,
                        mig=mig_layouts(group.mig),
                    )
                )
            except ValueError as error:
                raise ValueError(f"cluster.nodes[{i}]: {error}") from None
    submissions: list[Submission] = [
        job_spec_from_model(job, job.name, job.submit) for job in model.jobs
    ]
    queues = [build_queue(q) for q in model.queues]
    workload = model.workload
    if workload is not None:
        if workload.trace is not None:
            loaded = trace.load_trace(workload.trace, base)
            groups.extend(loaded.node_groups if model.cluster is None else ())
            submissions.extend(loaded.submissions)
            known = {q.name for q in queues}
            queues.extend(q for q in loaded.queues if q.name not in known)
        for i, generator in enumerate(workload.generators):
            if isinstance(generator, StreamModel):
                submissions.extend(_expand_stream(generator))
            else:
                try:
                    produced = generators.generate(generator.model_dump(), base)
                except ValueError as error:
                    raise ValueError(f"workload.generators[{i}]: {error}") from None
                if produced.node_groups and not groups:
                    groups.extend(produced.node_groups)
                known = {q.name for q in queues}
                queues.extend(q for q in produced.queues if q.name not in known)
                submissions.extend(produced.submissions)
    if not groups:
        raise ValueError("cluster: no nodes (give cluster.nodes, or a trace with nodes)")
    nodes = expand_node_groups(groups)
    names = [s.spec.name for s in submissions]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        for job_name in names:
            if job_name in seen:
                raise ValueError(f"jobs: duplicate job name {job_name!r}")
            seen.add(job_name)
    queue_names = [q.name for q in queues]
    if len(set(queue_names)) != len(queue_names):
        raise ValueError("queues: duplicate queue name")
    problem = tree_problem(queues)
    if problem is not None:
        raise ValueError(f"queues: {problem}")
    held_by_none = departments(queues)
    for i, job in enumerate(model.jobs):
        if job.queue in held_by_none:
            raise ValueError(f"jobs[{i}]: queue {job.queue!r} is a department: it holds no jobs")
    by_name = {q.name: q for q in queues}
    submissions = [  # time-sharing queues run 1-GPU single tasks as 1/N of a GPU
        replace(s, spec=time_share(s.spec, by_name.get(s.spec.queue))) for s in submissions
    ]
    submissions.sort(key=lambda s: (s.spec.submit, s.spec.name))
    config = policy_config(model.policy)
    return Scenario(
        nodes=nodes,
        queues=tuple(queues),
        submissions=tuple(submissions),
        config=config,
        until=model.until,
        name=model.name or name,
        warmup=workload.warmup if workload is not None else 0.0,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read a YAML or JSON scenario file; any problem becomes a one-line ScenarioError."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise ScenarioError(f"{file}: is a directory, not a scenario file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{file}: cannot read ({error.__class__.__name__})") from None
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise ScenarioError(f"{file}: invalid JSON at line {error.lineno}: {error.msg}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "syntax error"
        raise ScenarioError(f"{file}: invalid YAML{where}: {problem}") from None
    if data is None:
        raise ScenarioError(f"{file}: the file is empty")
    try:
        return parse_scenario(data, file.parent, file.stem)
    except ScenarioError as error:
        raise ScenarioError(f"{file}: {error}") from None
