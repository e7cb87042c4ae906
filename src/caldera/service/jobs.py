"""A job as the service keeps it: the request (`caldera.runtime.requests.RequestRecord`, stored
in its wire form), its tasks (processes) and the kernel's tracked
facts, with conversions to and from database rows (`caldera.runtime.wire`: the one record
format; placements key their node by index — the service's one host may change its name).

Work accounting is the kernel's (`caldera.runtime.TrackedJob`): `saved_work` moves with the
checkpoints the job reports through `caldera.sdk.preemption`, and a requeued job resumes
from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from caldera.core import JobView, TaskPlacement
from caldera.model import JobState
from caldera.runtime import wire
from caldera.runtime.job import TrackedJob
from caldera.runtime.requests import RequestRecord

__all__ = ["NODE_KEYS", "LiveJob", "TaskRun"]

NODE_KEYS = wire.ByIndex()


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
            "placement": wire.placement_to_wire(self.placement, NODE_KEYS),
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
        placement = wire.placement_from_wire(data["placement"], NODE_KEYS)
        assert placement is not None  # keyed by index: every key names a node
        return cls(
            rank=int(data["rank"]),
            attempt=int(data["attempt"]),
            placement=placement,
            pid=data.get("pid"),
            start_ticks=data.get("start_ticks"),
            master_port=int(data.get("master_port", 0)),
            leaving=bool(data.get("leaving", False)),
            kill_at=data.get("kill_at"),
            killed=bool(data.get("killed", False)),
            done=bool(data.get("done", False)),
            exit_code=data.get("exit_code"),
        )


@dataclass(kw_only=True)
class LiveJob(TrackedJob[TaskRun]):
    """A job of the service: the kernel's facts, the submitted request and the status files
    read from its tasks."""

    request: RequestRecord
    checkpoint_step: int | None = None
    control_seen: dict[str, float] = field(default_factory=dict)  # status file -> mtime read

    def view(self) -> JobView:
        """The cycle's view. The job's own claims of progress (what it reports through the
        SDK, or its `expected_duration`) count in W_eff only if its token has
        `trust_progress`; otherwise only the time it has run defends it (DESIGN §4.2's
        α·ln(1 + T_run) term; docs/service.md "Security model")."""
        view = super().view()
        if not self.request.trust_progress and view.reported_progress != 0.0:
            view = replace(view, reported_progress=0.0)
            self._view = view
        return view

    def forget_unrun_work(self) -> None:
        """A gang that never had `min_available` processes did no work: nothing of this
        attempt may be counted as lost (a task that could not be spawned, or that a crashed
        server committed and never spawned)."""
        if self.state is not JobState.RUNNING or self.running_since is None:
            return
        if sum(1 for t in self.running if t.pid is not None) < self.spec.min_available:
            self.running_since = None

    def row(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "id": spec.id,
            "name": spec.name,
            "user": spec.user,
            "queue": spec.queue,
            "type": spec.type.value,
            "state": self.state.value,
            "submit_time": spec.submit,
            "request": self.request.to_wire(),
            "tasks": [t.to_dict() for t in self.tasks],
            "nomination": wire.nomination_to_wire(self.nomination, NODE_KEYS),
            "checkpoint_step": self.checkpoint_step,
            **wire.status_to_wire(self),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LiveJob:
        request = RequestRecord.from_wire(row["request"])
        spec = request.spec(row["id"], float(row["submit_time"]), row["user"])
        job = cls(
            spec=spec,
            request=request,
            state=JobState(row["state"]),
            tasks=[TaskRun.from_dict(t) for t in row["tasks"] or []],
            nomination=wire.nomination_from_wire(row["nomination"], NODE_KEYS),
            checkpoint_step=row["checkpoint_step"],
        )
        wire.status_from_wire(job, row)
        return job
