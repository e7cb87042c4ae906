"""A TrainingJob's status: what the controller writes (and alone may write), and reads back.

    status:
      state: Running            queue: team-a       gpus: "32"       wait: 4m10s
      attempts: 2  retries: 0  evictions: 1  lostGPUSeconds: 0  exitCode: …  reason: …
      submitTime / startTime / endTime (RFC 3339)
      conditions:               Admitted, Held, Running, Preempted, Finished, Succeeded
      controller:               what a restarted controller needs (not an interface):
        the wire fields every runtime keeps (`caldera.runtime.wire`), the submit time,
        the reservation, the ranks of tasks leaving in a partial eviction, and how many
        tasks the attempt was running — the tasks themselves are on their pods.

Conditions are the kind `kubectl wait --for=condition=Running` reads; each moves with the
decisions (`apply_event`): admitted, held by the throttle or a window, started (Running
turns True once `min_available` pods run), preempted by whom, requeued, resumed, finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from caldera.k8s.cluster.api import to_rfc3339
from caldera.k8s.jobs import Condition, KubeJob
from caldera.model import GPU_MILLI, JobState
from caldera.model.lifecycle import TERMINAL
from caldera.runtime.wire import (
    NodeKeys,
    nomination_from_wire,
    nomination_to_wire,
    status_from_wire,
    status_to_wire,
)

__all__ = [
    "duration_text",
    "gpus_text",
    "phase",
    "rejected_status",
    "restore",
    "status_body",
    "submit_time",
]

_CONDITION_ORDER = (
    "Admitted",
    "Held",
    "Waiting",
    "Running",
    "Preempted",
    "Finished",
    "Succeeded",
)


def duration_text(seconds: float) -> str:
    """`kubectl get`'s way of writing a duration: 45s, 3m12s, 2h5m, 3d4h."""
    total = max(int(seconds), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def gpus_text(job: KubeJob) -> str:
    total = job.spec.gpu * job.spec.tasks / GPU_MILLI
    return f"{total:g}"


def _time(t: float | None) -> str | None:
    return to_rfc3339(t) if t is not None else None


# Unix times among what `status.controller` carries: written as RFC 3339 with microseconds,
# so `kubectl describe` shows "2026-12-04T10:25:47.123456Z", not "1.796e+09" (issue 34),
# and read back as the same float to the microsecond.
_TIMES = (
    "first_start",
    "start_time",
    "end_time",
    "running_since",
    "last_evicted_at",
    "signalled_at",
    "hold_since",
    "preempt_failed_at",
    "checkpoint_seen",
    "submit",
)


def _stamp(t: Any) -> Any:
    if not isinstance(t, int | float) or isinstance(t, bool):
        return t
    moment = datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds")
    return moment.replace("+00:00", "Z")


def _unstamp(value: Any) -> Any:
    """A time `_stamp` wrote (or a number an older controller wrote) as unix seconds."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return value


def status_body(job: KubeJob, keys: NodeKeys) -> dict[str, Any]:
    """The whole status, as a JSON merge patch of `/status` (None removes a field)."""
    leaving = [t.rank for t in job.tasks if t.leaving] if job.state is JobState.RUNNING else []
    wired = status_to_wire(job)
    controller = {
        **{k: _stamp(v) if k in _TIMES else v for k, v in wired.items()},
        "submit": _stamp(job.spec.submit),
        "queue": job.spec.queue,
        "nomination": nomination_to_wire(job.nomination, keys),
        "startedUnder": job.started_under,
        "leaving": leaving,
        "tasks": sum(1 for t in job.tasks if not t.done),
    }
    wait = job.first_start - job.spec.submit if job.first_start is not None else None
    order = {kind: i for i, kind in enumerate(_CONDITION_ORDER)}
    conditions = sorted(job.conditions.values(), key=lambda c: (order.get(c.type, 99), c.type))
    return {
        "state": job.state.value,
        "queue": job.spec.queue,
        "gpus": gpus_text(job),
        "wait": duration_text(wait) if wait is not None else None,
        "phase": phase(job),
        "reason": job.reason
        or (job.hold_reason if job.state is JobState.HELD else None)
        or (job.waiting if job.state is JobState.PENDING else None),
        "attempts": job.attempts,
        "retries": job.retries,
        "evictions": job.evictions,
        "exitCode": job.exit_code,
        "lostGPUSeconds": round(job.lost_gpu_seconds, 3),
        "submitTime": _time(job.spec.submit),
        "startTime": _time(job.first_start),
        "endTime": _time(job.end_time),
        "observedGeneration": job.generation,
        "conditions": [c.to_wire(job.generation, to_rfc3339) for c in conditions],
        # Finished jobs need nothing more: a restarted controller never takes them back.
        "controller": None if job.state in TERMINAL else controller,
    }


def phase(job: KubeJob) -> str:
    """What `kubectl get`'s STATE column shows: the state, except that a started job reads
    `Starting` until `min_available` of its pods run — never Running while its pods are
    Pending (issue 34). `state` itself stays the lifecycle's, for a restarted controller."""
    if job.state is JobState.RUNNING and job.running_since is None:
        return "Starting"
    return job.state.value


def rejected_status(reason: str, now: float, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The status of a TrainingJob refused before it became a job."""
    generation = int((obj.get("metadata") or {}).get("generation") or 1)
    when = to_rfc3339(now)
    conditions = [
        ("Admitted", "False"),
        ("Finished", "True"),
    ]
    return {
        "state": JobState.REJECTED.value,
        "phase": JobState.REJECTED.value,
        "reason": reason,
        "submitTime": when,
        "endTime": when,
        "observedGeneration": generation,
        "conditions": [
            {
                "type": kind,
                "status": status,
                "reason": "Rejected",
                "message": reason,
                "lastTransitionTime": when,
                "observedGeneration": generation,
            }
            for kind, status in conditions
        ],
    }


def submit_time(status: Mapping[str, Any]) -> float | None:
    controller = status.get("controller") or {}
    submit = _unstamp(controller.get("submit"))
    return float(submit) if submit is not None else None


def restore(job: KubeJob, status: Mapping[str, Any], keys: NodeKeys) -> None:
    """Put back what the status carries into a job rebuilt from its TrainingJob."""
    controller = {
        k: _unstamp(v) if k in _TIMES else v for k, v in (status.get("controller") or {}).items()
    }
    status_from_wire(job, controller)
    job.nomination = nomination_from_wire(controller.get("nomination"), keys)
    job.started_under = controller.get("startedUnder")
    job.expected_tasks = int(controller.get("tasks") or 0)
    for data in status.get("conditions") or []:
        if isinstance(data, Mapping) and data.get("type"):
            condition = Condition.from_wire(data)
            job.conditions[condition.type] = condition
    waiting = job.conditions.get("Waiting")
    if waiting is not None and waiting.status and job.state is JobState.PENDING:
        job.waiting, job.waiting_kind = waiting.message, waiting.reason
