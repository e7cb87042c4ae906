"""A job as the service keeps it: the request, its tasks (processes) and the runtime facts
the cycle reads, with conversions to and from database rows and to the cycle's `JobView`.

Work accounting follows the simulator: `running_since` is set while the whole gang runs,
`work_base` is the useful work done before it, `saved_work` what the last checkpoint the job
reported (through `caldera.sdk.preemption`) preserved. A requeued job resumes from
`saved_work`; the difference is lost work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from caldera.core import Nomination, PendingVictim, TaskPlacement
from caldera.model import (
    Checkpointing,
    JobSpec,
    JobState,
    JobType,
    TopologyMode,
    TopologySpec,
)
from caldera.tracking import TrackedJob

__all__ = [
    "LiveJob",
    "TaskRun",
    "nomination_from_dict",
    "nomination_to_dict",
    "placement_from_dict",
    "placement_to_dict",
    "spec_from_request",
]


def placement_to_dict(task: TaskPlacement) -> dict[str, Any]:
    return {
        "node": task.node,
        "devices": list(task.devices),
        "milli": task.milli,
        "cpu": task.cpu,
        "memory": task.memory,
    }


def placement_from_dict(data: dict[str, Any]) -> TaskPlacement:
    return TaskPlacement(
        int(data["node"]),
        tuple(int(d) for d in data["devices"]),
        int(data["milli"]),
        int(data.get("cpu", 0)),
        int(data.get("memory", 0)),
    )


def nomination_to_dict(nomination: Nomination | None) -> dict[str, Any] | None:
    if nomination is None:
        return None
    return {
        "placement": [placement_to_dict(t) for t in nomination.placement],
        "victims": list(nomination.victims),
        "pending": [
            {"job": victim.job, "tasks": [placement_to_dict(t) for t in victim.tasks]}
            for victim in nomination.pending
        ],
        "since": nomination.since,
        "reason": nomination.reason,
    }


def nomination_from_dict(data: dict[str, Any] | None) -> Nomination | None:
    if not data:
        return None
    return Nomination(
        tuple(placement_from_dict(t) for t in data["placement"]),
        tuple(data["victims"]),
        tuple(
            PendingVictim(str(v["job"]), tuple(placement_from_dict(t) for t in v["tasks"]))
            for v in data.get("pending", [])
        ),
        float(data["since"]),
        str(data.get("reason", "preempt")),
    )


def spec_from_request(job_id: str, request: dict[str, Any], submit: float, user: str) -> JobSpec:
    """The cycle's view of a normalised request (see `api.JobRequest.normalised`)."""
    topology = request.get("topology")
    checkpoint = request.get("checkpoint") or {}
    models = request.get("gpu_model")
    return JobSpec(
        id=job_id,
        name=request["name"],
        queue=request["queue"],
        type=JobType(request["type"]),
        submit=submit,
        tasks=int(request["tasks"]),
        gpu=int(request["gpu"]),
        cpu=int(request.get("cpu", 0)),
        memory=int(request.get("memory", 0)),
        min_available=int(request.get("min_available") or 0),
        labels=dict(request.get("labels") or {}),
        checkpoint=Checkpointing(
            checkpoint.get("interval"),
            float(checkpoint.get("cost", 0.0)),
            bool(checkpoint.get("on_sigterm", True)),
        ),
        expected_duration=request.get("expected_duration"),
        topology=(
            TopologySpec(TopologyMode(topology["mode"]), int(topology["highest_tier"]))
            if topology
            else None
        ),
        gpu_models=frozenset(models) if models else None,
        max_retries=int(request.get("max_retries", 0)),
        user=user,
        time_shared=int(request.get("time_shared", 0)),
        gpu_profile=request.get("gpu_profile"),
    )


@dataclass
class TaskRun:
    """One task of one attempt: where it runs and the process that runs it."""

    rank: int
    attempt: int
    placement: TaskPlacement
    pid: int | None = None
    start_ticks: int | None = None
    master_port: int = 0
    leaving: bool = False  # signalled by an eviction; holds its room until it exits
    kill_at: float | None = None  # SIGKILL the group at this time if still alive
    killed: bool = False
    done: bool = False
    exit_code: int | None = None  # None while running, or when nobody saw how it ended

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "attempt": self.attempt,
            "placement": placement_to_dict(self.placement),
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "master_port": self.master_port,
            "leaving": self.leaving,
            "kill_at": self.kill_at,
            "killed": self.killed,
            "done": self.done,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskRun:
        return cls(
            rank=int(data["rank"]),
            attempt=int(data["attempt"]),
            placement=placement_from_dict(data["placement"]),
            pid=data.get("pid"),
            start_ticks=data.get("start_ticks"),
            master_port=int(data.get("master_port", 0)),
            leaving=bool(data.get("leaving", False)),
            kill_at=data.get("kill_at"),
            killed=bool(data.get("killed", False)),
            done=bool(data.get("done", False)),
            exit_code=data.get("exit_code"),
        )


# Columns copied as they are between a LiveJob and its row.
_PLAIN = (
    "first_start",
    "start_time",
    "end_time",
    "running_since",
    "work_base",
    "saved_work",
    "checkpoint_seen",
    "checkpoint_step",
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
    "cancel_requested",
    "attempts",
    "retries",
    "exit_code",
    "reason",
    "lost_gpu_seconds",
)


@dataclass(kw_only=True)
class LiveJob(TrackedJob[TaskRun]):
    """A job of the service: the common facts, the submitted request and the status files
    read from its tasks."""

    request: dict[str, Any]
    checkpoint_step: int | None = None
    cancel_requested: bool = False
    control_seen: dict[str, float] = field(default_factory=dict)  # status file -> mtime read

    def row(self) -> dict[str, Any]:
        spec = self.spec
        row: dict[str, Any] = {
            "id": spec.id,
            "name": spec.name,
            "user": spec.user,
            "queue": spec.queue,
            "type": spec.type.value,
            "state": self.state.value,
            "submit_time": spec.submit,
            "request": self.request,
            "tasks": [t.to_dict() for t in self.tasks],
            "nomination": nomination_to_dict(self.nomination),
        }
        for name in _PLAIN:
            row[name] = getattr(self, name)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LiveJob:
        request = dict(row["request"])
        spec = spec_from_request(row["id"], request, float(row["submit_time"]), row["user"])
        job = cls(
            spec=spec,
            request=request,
            state=JobState(row["state"]),
            tasks=[TaskRun.from_dict(t) for t in row["tasks"] or []],
            nomination=nomination_from_dict(row["nomination"]),
        )
        for name in _PLAIN:
            setattr(job, name, row[name])
        job.throttled_once = bool(job.throttled_once)
        job.cancel_requested = bool(job.cancel_requested)
        return job
