"""Job records: how a job lives on the cluster between submission and its end.

A submission is a ConfigMap labelled `caldera.io/job-record: "true"` whose `job.yaml` holds
the request (queue, type, tasks, GPUs, image, command, …). The platform layer (DESIGN §7) is
the controller: it admits the record, holds it while its queue waits for a large job, and
creates pods only when the cycle starts it — nothing reaches Volcano before caldera decided
where it runs. The record's annotations carry the runtime state (`caldera.io/status`, JSON)
and the preemptor's reservation (`caldera.io/nomination`), so a restarted controller loses
nothing; its `caldera.io/state` label lets `kubectl get cm -l caldera.io/state=Pending` work.

    apiVersion: v1
    kind: ConfigMap
    metadata: {name: bert-ft, namespace: team-a, labels: {caldera.io/job-record: "true"}}
    data:
      job.yaml: |
        queue: team-a
        type: large-job
        tasks: 4
        gpus: 8
        image: registry.example.com/train:v1
        command: [torchrun, --nnodes=4, --nproc_per_node=8, train.py]
        topology: {mode: hard, highest_tier: 1}

`KubeJob` is the controller's in-memory form, with the same work accounting as the service's
`LiveJob`; placements are stored with node *names* so they survive a change of node order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from caldera.core import Nomination, PendingVictim, TaskPlacement
from caldera.errors import RecordError
from caldera.k8s import names
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobSpec,
    JobState,
    JobType,
    Node,
    TopologyMode,
    TopologySpec,
    parse_cpu,
    parse_gpu_milli,
    parse_memory_mib,
)
from caldera.tracking import TrackedJob

__all__ = [
    "JobRequest",
    "KubeJob",
    "KubeTask",
    "RecordError",
    "nomination_from_json",
    "nomination_to_json",
    "parse_request",
    "placement_from_json",
    "placement_to_json",
    "spec_from_request",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopologyIn(_Strict):
    mode: Literal["hard", "soft"] = "soft"
    highest_tier: Literal[1, 2] = 1


class CheckpointIn(_Strict):
    interval: float | None = Field(default=None, gt=0)
    cost: float = Field(default=0.0, ge=0)
    on_sigterm: bool = True


class JobRequest(_Strict):
    """What a record's `job.yaml` may say. GPUs are per task; a fraction only for one task."""

    queue: str = Field(min_length=1)
    type: JobType = JobType.NORMAL
    tasks: int = Field(default=1, ge=1, le=4096)
    gpus: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    min_available: int | None = Field(default=None, ge=1)
    cpu: float | str | None = None
    memory: int | str | None = None
    image: str | None = None
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    topology: TopologyIn | None = None
    checkpoint: CheckpointIn | None = None
    expected_duration: float | None = Field(default=None, gt=0)
    max_retries: int = Field(default=0, ge=0, le=100)
    gpu_model: list[str] | str | None = None
    # A PodTemplateSpec (metadata + spec) for volumes, tolerations, sidecars. Its first
    # container runs the task; caldera sets the fields that decide scheduling.
    template: dict[str, Any] | None = None


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    return f"{where}: {message}"


def parse_request(config_map: dict[str, Any]) -> JobRequest:
    """The request in a record ConfigMap, or RecordError with a one-line reason."""
    text = (config_map.get("data") or {}).get(names.RECORD_KEY)
    if text is None:
        raise RecordError(f"the record has no data.{names.RECORD_KEY}")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise RecordError(f"data.{names.RECORD_KEY} is not valid YAML") from None
    if not isinstance(data, dict):
        raise RecordError(f"data.{names.RECORD_KEY} must be a mapping")
    try:
        return JobRequest.model_validate(data)
    except ValidationError as error:
        raise RecordError(_one_line(error)) from None


def spec_from_request(request: JobRequest, namespace: str, name: str, submit: float) -> JobSpec:
    """The cycle's view of a request; RecordError for requests no runtime could run."""
    try:
        gpu = parse_gpu_milli(request.gpus)
        cpu = parse_cpu(request.cpu) if request.cpu is not None else 0
        memory = parse_memory_mib(request.memory) if request.memory is not None else 0
    except ValueError as error:
        raise RecordError(str(error)) from None
    if 0 < gpu < GPU_MILLI and request.tasks != 1:
        raise RecordError("fractional gpus are allowed only for a single task")
    if request.min_available is not None and request.min_available > request.tasks:
        raise RecordError(
            f"min_available ({request.min_available}) exceeds tasks ({request.tasks})"
        )
    checkpoint = request.checkpoint or CheckpointIn()
    models = request.gpu_model
    topology = request.topology
    return JobSpec(
        id=names.job_id(namespace, name),
        name=name,
        queue=request.queue,
        type=request.type,
        submit=submit,
        tasks=request.tasks,
        gpu=gpu,
        cpu=cpu,
        memory=memory,
        min_available=request.min_available or 0,
        labels=dict(request.labels),
        namespace=namespace,
        checkpoint=Checkpointing(checkpoint.interval, checkpoint.cost, checkpoint.on_sigterm),
        expected_duration=request.expected_duration,
        topology=(
            TopologySpec(TopologyMode(topology.mode), topology.highest_tier) if topology else None
        ),
        gpu_models=frozenset([models] if isinstance(models, str) else models) if models else None,
        max_retries=request.max_retries,
        user=namespace,
    )


# -- placements with node names --------------------------------------------------------------


def placement_to_json(task: TaskPlacement, nodes: tuple[Node, ...]) -> dict[str, Any]:
    return {
        "node": nodes[task.node].name,
        "devices": list(task.devices),
        "milli": task.milli,
        "cpu": task.cpu,
        "memory": task.memory,
    }


def placement_from_json(data: dict[str, Any], index: dict[str, int]) -> TaskPlacement | None:
    """None when the node is not (or no longer) one caldera schedules on."""
    node = index.get(str(data["node"]))
    if node is None:
        return None
    return TaskPlacement(
        node,
        tuple(int(d) for d in data["devices"]),
        int(data["milli"]),
        int(data.get("cpu", 0)),
        int(data.get("memory", 0)),
    )


def nomination_to_json(nomination: Nomination, nodes: tuple[Node, ...]) -> dict[str, Any]:
    return {
        "placement": [placement_to_json(t, nodes) for t in nomination.placement],
        "victims": list(nomination.victims),
        "pending": [
            {"job": v.job, "tasks": [placement_to_json(t, nodes) for t in v.tasks]}
            for v in nomination.pending
        ],
        "since": nomination.since,
        "reason": nomination.reason,
    }


def nomination_from_json(data: dict[str, Any], index: dict[str, int]) -> Nomination | None:
    """None when a node it names is gone: the cycle then plans again from what exists."""
    placement = [placement_from_json(t, index) for t in data["placement"]]
    pending: list[PendingVictim] = []
    for victim in data.get("pending", []):
        tasks = [placement_from_json(t, index) for t in victim["tasks"]]
        if any(t is None for t in tasks):
            return None
        pending.append(PendingVictim(str(victim["job"]), tuple(t for t in tasks if t)))
    if any(t is None for t in placement):
        return None
    return Nomination(
        tuple(t for t in placement if t),
        tuple(str(v) for v in data["victims"]),
        tuple(pending),
        float(data["since"]),
        str(data.get("reason", "preempt")),
    )


# -- the controller's job ------------------------------------------------------------------


@dataclass
class KubeTask:
    """One task of one attempt: its decided placement and the pod that runs it."""

    rank: int
    attempt: int
    placement: TaskPlacement
    pod: str
    created_at: float = 0.0
    leaving: bool = False  # deleted for an eviction; holds its room until the pod is gone
    kill_at: float | None = None  # end of its grace period
    stopping: bool = False  # deleted because its gang broke (not an eviction)
    bound: bool = False  # Volcano bound it to its node
    done: bool = False
    exit_code: int | None = None  # None while running, or when nobody saw how it ended
    counted: bool = field(default=False, compare=False)  # its room is taken in the index

    def to_json(self, nodes: tuple[Node, ...]) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "attempt": self.attempt,
            "placement": placement_to_json(self.placement, nodes),
            "pod": self.pod,
            "created_at": self.created_at,
            "leaving": self.leaving,
            "kill_at": self.kill_at,
            "stopping": self.stopping,
            "bound": self.bound,
            "done": self.done,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], index: dict[str, int]) -> KubeTask | None:
        placement = placement_from_json(data["placement"], index)
        if placement is None:
            return None
        return cls(
            rank=int(data["rank"]),
            attempt=int(data["attempt"]),
            placement=placement,
            pod=str(data["pod"]),
            created_at=float(data.get("created_at", 0.0)),
            leaving=bool(data.get("leaving", False)),
            kill_at=data.get("kill_at"),
            stopping=bool(data.get("stopping", False)),
            bound=bool(data.get("bound", False)),
            done=bool(data.get("done", False)),
            exit_code=data.get("exit_code"),
        )


# Status fields copied as they are between a KubeJob and its record annotation.
_PLAIN = (
    "first_start",
    "start_time",
    "end_time",
    "running_since",
    "work_base",
    "saved_work",
    "checkpoint_seen",
    "reported_progress",
    "evictions",
    "last_evicted_at",
    "evicted_for",
    "evict_reason",
    "signalled_at",
    "work_at_signal",
    "signal_gpu",
    "hold_reason",
    "hold_since",
    "throttled_once",
    "preempt_failed_at",
    "attempts",
    "retries",
    "exit_code",
    "reason",
    "lost_gpu_seconds",
)


@dataclass(kw_only=True)
class KubeJob(TrackedJob[KubeTask]):
    """A job of the controller: the common facts and the record (ConfigMap) it lives in."""

    request: JobRequest
    namespace: str
    name: str
    uid: str  # the record's uid: owner of everything created for the job
    started_under: dict[str, Any] | None = None  # the nomination it started with (audit)
    lost_tasks: int = 0  # tasks on nodes that are gone (not persisted: found on loading)

    # -- the record's annotations ------------------------------------------------------------

    def status_json(self, nodes: tuple[Node, ...]) -> str:
        data: dict[str, Any] = {
            "state": self.state.value,
            "submit": self.spec.submit,
            "request": self.request.model_dump(mode="json", exclude_defaults=True),
            "tasks": [t.to_json(nodes) for t in self.tasks],
            "started_under": self.started_under,
        }
        for name in _PLAIN:
            data[name] = getattr(self, name)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    def nomination_json(self, nodes: tuple[Node, ...]) -> str | None:
        if self.nomination is None:
            return None
        return json.dumps(
            nomination_to_json(self.nomination, nodes), separators=(",", ":"), sort_keys=True
        )

    @classmethod
    def from_record(
        cls,
        request: JobRequest,
        namespace: str,
        name: str,
        uid: str,
        status: dict[str, Any],
        nomination: dict[str, Any] | None,
        index: dict[str, int],
    ) -> KubeJob:
        """Rebuild a job from its record. Tasks on nodes caldera no longer schedules on are
        counted in `lost_tasks`: the runtime stops the rest of the gang and requeues it."""
        spec = spec_from_request(request, namespace, name, float(status["submit"]))
        job = cls(
            spec=spec,
            request=request,
            namespace=namespace,
            name=name,
            uid=uid,
            state=JobState(status["state"]),
        )
        for data in status.get("tasks") or []:
            task = KubeTask.from_json(data, index)
            if task is None:
                job.lost_tasks += 0 if data.get("done") else 1
                continue
            job.tasks.append(task)
        for key in _PLAIN:
            if key in status:
                setattr(job, key, status[key])
        job.started_under = status.get("started_under")
        job.throttled_once = bool(job.throttled_once)
        job.nomination = nomination_from_json(nomination, index) if nomination else None
        return job
