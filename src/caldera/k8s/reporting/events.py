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
starts wrote about two Events per job). A plain start — a job's first attempt, not grown,
not resumed — gets none: its conditions already say all the Event would (Admitted: the
queue and shape; Running: the attempt and its nodes, kept when the pods run), and the Event
was a fourth write per started single-pod job (issue 40: at most three). What happens next
(preempted, requeued, retried, finished) has its Event as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple

from caldera.k8s.cluster.api import to_rfc3339
from caldera.k8s.jobs import KubeJob
from caldera.model import GPU_MILLI
from caldera.runtime import EventKind
from caldera.trainingjob_api import API_VERSION, GROUP, KIND

__all__ = ["JobEvent", "Reason", "Said", "event_body", "merge_per_job", "narrate"]

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


# The Starting condition's message ends so; the Running one keeps what came before it.
_WAITING_PODS = ": waiting for the pods to run"


class Said(NamedTuple):
    """What `narrate` has to say about a decision: the Event's reason and message, and
    whether the conditions already say it all (`quiet`: no Event of its own)."""

    reason: Reason
    message: str
    quiet: bool = False


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One Event about one TrainingJob. `quiet`: its conditions say the same; it is not sent
    and takes the job's Admitted Event of the same step with it (`merge_per_job`)."""

    namespace: str
    name: str
    uid: str
    reason: Reason
    message: str
    time: float
    quiet: bool = False

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
    on …"): a burst of starts writes one Event per job, not two. A quiet Event (a plain
    start) goes with the admission's: none is sent, the conditions say both. Every other
    Event stays its own: each is rare and is looked for by its reason (`kubectl get events
    --field-selector reason=Preempted`)."""
    merged: list[JobEvent] = []
    admitted: dict[tuple[str, str, str], JobEvent] = {}
    for event in events:
        key = (event.namespace, event.name, event.uid)
        if event.reason is Reason.ADMITTED:
            admitted[key] = event
            continue
        first = admitted.pop(key, None)
        if event.quiet:
            continue
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
) -> Said | None:
    """Move the job's conditions for a decision (or a finding of the controller's own) and
    return the Event to emit; None: nothing to say."""
    spec = job.spec
    if kind is EventKind.SUBMIT:
        text = (
            f"queue {spec.queue}, {spec.type.value}, {spec.tasks} task(s) x {_gpus(spec.gpu)} GPU"
        )
        job.condition("Admitted", True, "Admitted", text, now)
        if data.get("held"):
            job.condition("Held", True, "Held", _hold_text(str(data["held"])), now)
            text += f"; {_hold_text(str(data['held']))}"
        return Said(Reason.ADMITTED, text)
    if kind is EventKind.REJECT:
        reason = str(data.get("reason") or "rejected")
        job.condition("Admitted", False, "Rejected", reason, now)
        job.condition("Finished", True, "Rejected", reason, now)
        return Said(Reason.REJECTED, reason)
    if kind is EventKind.HOLD:
        text = _hold_text(str(data.get("reason") or ""))
        job.condition("Held", True, "Held", text, now)
        return Said(Reason.HELD, text)
    if kind is EventKind.RELEASE:
        text = f"released ({data.get('reason') or 'released'})"
        job.condition("Held", False, "Released", text, now)
        return Said(Reason.RELEASED, text)
    if kind is EventKind.START:
        grow = bool(data.get("grow"))
        text = f"attempt {job.attempts} on {_where(data.get('placement') or {})}"
        if grow:
            return Said(Reason.STARTED, f"grown: {text}")
        if job.waiting_kind is not None:
            job.condition("Waiting", False, "Started", text, now)
        job.waiting = job.waiting_kind = None
        job.condition("Running", False, "Starting", f"{text}{_WAITING_PODS}", now)
        preempted = job.conditions.get("Preempted")
        if preempted is not None and preempted.status:
            job.condition("Preempted", False, "Resumed", text, now)
            return Said(Reason.RESUMED, f"resumed from its last checkpoint: {text}")
        # A first attempt's start: the Admitted and Running conditions say it all.
        return Said(Reason.STARTED, text, quiet=job.attempts <= 1)
    if kind is Reason.RUNNING:
        text = f"{data.get('pods')} pod(s) running"
        starting = job.conditions.get("Running")
        if starting is not None and starting.message.endswith(_WAITING_PODS):
            # where it runs stays said ("attempt 1 on n0:1: 1 pod(s) running"): a plain
            # start has no Event that says it
            text = f"{starting.message.removesuffix(_WAITING_PODS)}: {text}"
        job.condition("Running", True, "Running", text, now)
        return None  # the condition only: the Started Event, if any, said where
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
        return Said(Reason.PREEMPTED, text)
    if kind is EventKind.REQUEUE:
        why = str(data.get("reason") or "evicted")
        lost = float(data.get("lost_gpu_seconds") or 0.0)
        text = f"requeued ({why}) with its original submit time; {lost:.0f} GPU-seconds lost"
        job.condition("Running", False, "Requeued", text, now)
        return Said(Reason.REQUEUED, text)
    if kind is EventKind.FINISH:
        text = "all tasks exited 0"
        job.condition("Running", False, "Succeeded", text, now)
        job.condition("Finished", True, "Succeeded", text, now)
        job.condition("Succeeded", True, "Succeeded", text, now)
        return Said(Reason.SUCCEEDED, text)
    if kind is EventKind.FAIL:
        code = data.get("exit_code")
        if data.get("retry"):
            text = f"exit code {code}: retry {data['retry']} of {spec.max_retries}"
            job.condition("Running", False, "Retrying", text, now)
            return Said(Reason.RETRYING, text)
        text = job.reason or f"exited with code {code}"
        job.condition("Running", False, "Failed", text, now)
        job.condition("Finished", True, "Failed", text, now)
        job.condition("Succeeded", False, "Failed", text, now)
        return Said(Reason.FAILED, text)
    if kind is EventKind.CANCEL:
        job.condition("Running", False, "Cancelled", "cancelled", now)
        job.condition("Finished", True, "Cancelled", "cancelled", now)
        return Said(Reason.CANCELLED, "cancelled")
    if kind is EventKind.THROTTLE_ON:
        text = (
            f"queue {data.get('queue')} holds new submissions below large-job until this job "
            "starts or the throttle times out"
        )
        return Said(Reason.THROTTLING, text)
    if kind is EventKind.THROTTLE_OFF:
        return Said(Reason.THROTTLE_ENDED, f"queue {data.get('queue')}: {data.get('reason')}")
    if kind is Reason.EVICTION_REFUSED and data.get("kept"):
        text = str(data.get("message") or "eviction refused: rolled back")
        job.condition("Preempted", False, "EvictionRefused", text, now)
        if data.get("whole"):
            running = job.running_since is not None
            job.condition("Running", running, "Running" if running else "Starting", text, now)
        return Said(Reason.EVICTION_REFUSED, text)
    if kind is Reason.WAITING:
        text = str(data.get("message") or "waiting")
        job.condition("Waiting", True, str(data.get("wait") or "Waiting"), text, now)
        return Said(Reason.WAITING, text)
    if isinstance(kind, Reason):
        return Said(kind, str(data.get("message") or kind.value))  # the controller's findings
    return None


def _hold_text(reason: str) -> str:
    if reason == "throttle":
        return "held: its queue waits for a large job to start (throttle)"
    if reason == "window":
        return "held: outside its queue's time window"
    return f"held: {reason}" if reason else "held"
