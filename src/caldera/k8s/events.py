"""What each decision says to the TrainingJob's owner: its conditions and an Event.

`kubectl describe trainingjob NAME` lists the Events, `kubectl get -w` the state column,
`kubectl wait --for=condition=…` the conditions. One function per decision keeps the three
in step (`narrate`): admitted, rejected, held by the throttle or a window, released,
started on which nodes, running, preempted by whom and why, requeued (with the work lost),
resumed, finished, failed, cancelled; and the controller's own: a start given up, a victim
stuck terminating, an eviction refused, a PodGroup Volcano refused.

Events are best effort (the API server may drop them, they expire after an hour); the
conditions in the status are the record. A job admitted and started in one step gets one
`Started` Event that says both (`merge_per_job`), not two writes (issue 40: a burst of
starts wrote about two Events per job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from caldera.k8s.api import to_rfc3339
from caldera.k8s.jobs import KubeJob
from caldera.model import GPU_MILLI
from caldera.runtime import EventKind
from caldera.trainingjob_api import API_VERSION, GROUP, KIND

__all__ = ["JobEvent", "Reason", "event_body", "merge_per_job", "narrate"]

COMPONENT = "caldera-controller"


class Reason(StrEnum):
    ADMITTED = "Admitted"
    REJECTED = "Rejected"
    HELD = "Held"
    RELEASED = "Released"
    STARTED = "Started"
    RUNNING = "Running"
    RESUMED = "Resumed"
    PREEMPTED = "Preempted"
    REQUEUED = "Requeued"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RETRYING = "Retrying"
    CANCELLED = "Cancelled"
    THROTTLING = "Throttling"
    THROTTLE_ENDED = "ThrottleEnded"
    START_TIMEOUT = "StartTimeout"
    NOT_READY = "NotReady"
    STUCK_TERMINATING = "StuckTerminating"
    EVICTION_REFUSED = "EvictionRefused"
    CREATE_REFUSED = "CreateRefused"
    POD_GROUP_REFUSED = "PodGroupRefused"
    BAD_REPORT = "BadReport"
    WAITING = "Waiting"


_WARNINGS = frozenset(
    {
        Reason.REJECTED,
        Reason.PREEMPTED,
        Reason.FAILED,
        Reason.START_TIMEOUT,
        Reason.NOT_READY,
        Reason.STUCK_TERMINATING,
        Reason.EVICTION_REFUSED,
        Reason.CREATE_REFUSED,
        Reason.POD_GROUP_REFUSED,
        Reason.BAD_REPORT,
    }
)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One Event about one TrainingJob."""

    namespace: str
    name: str
    uid: str
    reason: Reason
    message: str
    time: float

    @property
    def warning(self) -> bool:
        return self.reason in _WARNINGS


def event_body(event: JobEvent, instance: str, sequence: int = 0) -> dict[str, Any]:
    """A core/v1 Event (what `kubectl describe` and `kubectl events` show). Its name sorts
    in the order the controller said things (timestamps have whole seconds only)."""
    stamp = to_rfc3339(event.time)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{event.name[:200]}.{int(event.time * 1e6):014x}{sequence % 2**24:06x}",
            "namespace": event.namespace,
        },
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": event.name,
            "namespace": event.namespace,
            "uid": event.uid,
        },
        "reason": event.reason.value,
        "message": event.message[:1024],
        "type": "Warning" if event.warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": f"{GROUP}/controller",
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def merge_per_job(events: Sequence[JobEvent]) -> list[JobEvent]:
    """A job admitted and then started (or held, or told to wait) in one step gets one Event,
    the later one, its message opening with the admission's ("admitted: queue …; attempt 1
    on …"): a burst of starts writes one Event per job, not two. Every other Event stays its
    own: each is rare and is looked for by its reason (`kubectl get events --field-selector
    reason=Preempted`)."""
    merged: list[JobEvent] = []
    admitted: dict[tuple[str, str, str], JobEvent] = {}
    for event in events:
        key = (event.namespace, event.name, event.uid)
        if event.reason is Reason.ADMITTED:
            admitted[key] = event
            continue
        first = admitted.pop(key, None)
        if first is not None and not event.warning:
            event = replace(event, message=f"admitted: {first.message}; {event.message}")
        elif first is not None:
            merged.append(first)
        merged.append(event)
    merged += admitted.values()  # admitted, nothing more said this step
    return merged


def _gpus(milli: float) -> str:
    return f"{milli / GPU_MILLI:g}"


def _where(placement: Mapping[str, float]) -> str:
    return ", ".join(f"{node}:{gpus:g}" for node, gpus in sorted(placement.items()))


def narrate(
    kind: EventKind | Reason, job: KubeJob, now: float, data: Mapping[str, Any]
) -> tuple[Reason, str] | None:
    """Move the job's conditions for a decision (or a finding of the controller's own) and
    return the Event to emit (reason, message); None: nothing to say."""
    spec = job.spec
    if kind is EventKind.SUBMIT:
        text = (
            f"queue {spec.queue}, {spec.type.value}, {spec.tasks} task(s) x {_gpus(spec.gpu)} GPU"
        )
        job.condition("Admitted", True, "Admitted", text, now)
        if data.get("held"):
            job.condition("Held", True, "Held", _hold_text(str(data["held"])), now)
            text += f"; {_hold_text(str(data['held']))}"
        return Reason.ADMITTED, text
    if kind is EventKind.REJECT:
        reason = str(data.get("reason") or "rejected")
        job.condition("Admitted", False, "Rejected", reason, now)
        job.condition("Finished", True, "Rejected", reason, now)
        return Reason.REJECTED, reason
    if kind is EventKind.HOLD:
        text = _hold_text(str(data.get("reason") or ""))
        job.condition("Held", True, "Held", text, now)
        return Reason.HELD, text
    if kind is EventKind.RELEASE:
        text = f"released ({data.get('reason') or 'released'})"
        job.condition("Held", False, "Released", text, now)
        return Reason.RELEASED, text
    if kind is EventKind.START:
        grow = bool(data.get("grow"))
        text = f"attempt {job.attempts} on {_where(data.get('placement') or {})}"
        if grow:
            return Reason.STARTED, f"grown: {text}"
        if job.waiting_kind is not None:
            job.condition("Waiting", False, "Started", text, now)
        job.waiting = job.waiting_kind = None
        job.condition("Running", False, "Starting", f"{text}: waiting for the pods to run", now)
        preempted = job.conditions.get("Preempted")
        if preempted is not None and preempted.status:
            job.condition("Preempted", False, "Resumed", text, now)
            return Reason.RESUMED, f"resumed from its last checkpoint: {text}"
        return Reason.STARTED, text
    if kind is Reason.RUNNING:
        text = f"{data.get('pods')} pod(s) running"
        job.condition("Running", True, "Running", text, now)
        return None  # the Started Event said where; this is the condition only
    if kind is EventKind.EVICT:
        why = str(data.get("reason") or "preempt")
        preemptor = data.get("preemptor")
        text = (f"{why} by {preemptor}" if preemptor else why) + (
            f": {len(data.get('tasks') or [])} task(s) asked to leave, "
            f"grace period {float(data.get('grace') or 0):g} s"
        )
        job.condition("Preempted", True, "Preempted", text, now)
        if data.get("whole"):
            job.condition("Running", False, "Preempted", text, now)
        return Reason.PREEMPTED, text
    if kind is EventKind.REQUEUE:
        why = str(data.get("reason") or "evicted")
        lost = float(data.get("lost_gpu_seconds") or 0.0)
        text = f"requeued ({why}) with its original submit time; {lost:.0f} GPU-seconds lost"
        job.condition("Running", False, "Requeued", text, now)
        return Reason.REQUEUED, text
    if kind is EventKind.FINISH:
        text = "all tasks exited 0"
        job.condition("Running", False, "Succeeded", text, now)
        job.condition("Finished", True, "Succeeded", text, now)
        job.condition("Succeeded", True, "Succeeded", text, now)
        return Reason.SUCCEEDED, text
    if kind is EventKind.FAIL:
        code = data.get("exit_code")
        if data.get("retry"):
            text = f"exit code {code}: retry {data['retry']} of {spec.max_retries}"
            job.condition("Running", False, "Retrying", text, now)
            return Reason.RETRYING, text
        text = job.reason or f"exited with code {code}"
        job.condition("Running", False, "Failed", text, now)
        job.condition("Finished", True, "Failed", text, now)
        job.condition("Succeeded", False, "Failed", text, now)
        return Reason.FAILED, text
    if kind is EventKind.CANCEL:
        job.condition("Running", False, "Cancelled", "cancelled", now)
        job.condition("Finished", True, "Cancelled", "cancelled", now)
        return Reason.CANCELLED, "cancelled"
    if kind is EventKind.THROTTLE_ON:
        text = (
            f"queue {data.get('queue')} holds new submissions below large-job until this job "
            "starts or the throttle times out"
        )
        return Reason.THROTTLING, text
    if kind is EventKind.THROTTLE_OFF:
        return Reason.THROTTLE_ENDED, f"queue {data.get('queue')}: {data.get('reason')}"
    if kind is Reason.EVICTION_REFUSED and data.get("kept"):
        text = str(data.get("message") or "eviction refused: rolled back")
        job.condition("Preempted", False, "EvictionRefused", text, now)
        if data.get("whole"):
            running = job.running_since is not None
            job.condition("Running", running, "Running" if running else "Starting", text, now)
        return Reason.EVICTION_REFUSED, text
    if kind is Reason.WAITING:
        text = str(data.get("message") or "waiting")
        job.condition("Waiting", True, str(data.get("wait") or "Waiting"), text, now)
        return Reason.WAITING, text
    if isinstance(kind, Reason):
        return kind, str(data.get("message") or kind.value)  # the controller's own findings
    return None


def _hold_text(reason: str) -> str:
    if reason == "throttle":
        return "held: its queue waits for a large job to start (throttle)"
    if reason == "window":
        return "held: outside its queue's time window"
    return f"held: {reason}" if reason else "held"
