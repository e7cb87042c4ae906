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
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from caldera.config import CheckpointModel, TopologyModel
from caldera.core import TaskPlacement
from caldera.errors import RecordError
from caldera.k8s import names
from caldera.model import (
    Checkpointing,
    JobSpec,
    JobState,
    JobType,
)
from caldera.runtime import wire
from caldera.runtime.job import TrackedJob
from caldera.runtime.requests import job_spec, task_shape, topology_spec

__all__ = [
    "JobRequest",
    "KubeJob",
    "KubeTask",
    "RecordError",
    "parse_request",
    "spec_from_request",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    topology: TopologyModel | None = None
    checkpoint: CheckpointModel | None = None
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
    """The cycle's view of a request; RequestError for requests no runtime could run."""
    checkpoint = request.checkpoint or CheckpointModel()
    return job_spec(
        id=names.job_id(namespace, name),
        name=name,
        queue=request.queue,
        type=request.type,
        submit=submit,
        shape=task_shape(
            request.tasks, request.gpus, request.min_available, request.cpu, request.memory
        ),
        labels=request.labels,
        namespace=namespace,
        checkpoint=Checkpointing(checkpoint.interval, checkpoint.cost, checkpoint.on_sigterm),
        expected_duration=request.expected_duration,
        topology=topology_spec(request.topology.model_dump() if request.topology else None),
        gpu_model=request.gpu_model,
        max_retries=request.max_retries,
        user=namespace,
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

    def to_json(self, keys: wire.NodeKeys) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "attempt": self.attempt,
            "placement": wire.placement_to_wire(self.placement, keys),
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
    def from_json(cls, data: dict[str, Any], keys: wire.NodeKeys) -> KubeTask | None:
        placement = wire.placement_from_wire(data["placement"], keys)
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

    def status_json(self, keys: wire.NodeKeys) -> str:
        data: dict[str, Any] = {
            "state": self.state.value,
            "submit": self.spec.submit,
            "request": self.request.model_dump(mode="json", exclude_defaults=True),
            "tasks": [t.to_json(keys) for t in self.tasks],
            "started_under": self.started_under,
            **wire.status_to_wire(self),
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    def nomination_json(self, keys: wire.NodeKeys) -> str | None:
        if self.nomination is None:
            return None
        return json.dumps(
            wire.nomination_to_wire(self.nomination, keys), separators=(",", ":"), sort_keys=True
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
        keys: wire.NodeKeys,
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
            task = KubeTask.from_json(data, keys)
            if task is None:
                job.lost_tasks += 0 if data.get("done") else 1
                continue
            job.tasks.append(task)
        wire.status_from_wire(job, status)
        job.started_under = status.get("started_under")
        job.nomination = wire.nomination_from_wire(nomination, keys)
        return job
