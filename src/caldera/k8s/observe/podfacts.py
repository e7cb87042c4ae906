"""What the pod watcher reads in a pod, and what it tells the runtime it saw.

The readings are pure: a pod's exit code, when its container started, why it waits or is
not bound, the job's own reports on it (`read_reports`), the back-off after repeated
give-ups (`start_backoff`), and the pods a TrainingJob owns that lost caldera's labels
(`claim_unlabelled`). The observations are what `caldera.k8s.observe.pods.PodWatcher` yields and
`caldera.k8s.observe.podapply` applies to the runtime (as `caldera.service.observe` does for the
service): small frozen records that change nothing themselves.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from caldera.k8s.cluster.api import Object, from_rfc3339
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.reporting.events import Reason
from caldera.trainingjob_api import ATTEMPT, CHECKPOINT, GROUP, JOB, KIND, MANAGED, PROGRESS, RANK

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "ENDED",
    "EXPECT",
    "GIVEN_UP",
    "JUDGED",
    "WITHHOLD",
    "GangRunning",
    "OrphanHeld",
    "OrphanReleased",
    "OrphanRemoved",
    "PodObservation",
    "Reported",
    "Resend",
    "StartGivenUp",
    "StartHeld",
    "StartReleased",
    "StuckTerminating",
    "TaskEnded",
    "TaskSeen",
    "TasksEnded",
    "claim_unlabelled",
    "exit_code",
    "node_view",
    "ordinal",
    "read_reports",
    "same_reason",
    "start_backoff",
    "started_at",
    "unscheduled_reason",
    "waiting_reason",
]

log = logging.getLogger("caldera.k8s")

ENDED = ("Succeeded", "Failed")
EXPECT = 60.0  # seconds a pod caldera created may take to appear in what it reads


def exit_code(pod: Mapping[str, Any]) -> int | None:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is not None and "exitCode" in terminated:
            return int(terminated["exitCode"])
    phase = status.get("phase")
    return 0 if phase == "Succeeded" else (1 if phase == "Failed" else None)


def started_at(pod: Mapping[str, Any]) -> float | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running")
        if running and running.get("startedAt"):
            return from_rfc3339(str(running["startedAt"]))
    return None


def waiting_reason(pod: Mapping[str, Any]) -> str:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str((pod.get("status") or {}).get("phase") or "Pending")


def unscheduled_reason(pod: Mapping[str, Any]) -> str:
    """The scheduler's own word on why a pod is not bound ("0/4 nodes are available: …"),
    from its PodScheduled condition; "" when it said nothing."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            text = " ".join(str(condition.get("message") or condition.get("reason") or "").split())
            return text[:300]
    return ""


# Seconds a node whose pods would not bind keeps its free room from new starts: the
# scheduler disagreed with caldera's view of it (issue 34: a job was pinned there again
# after every start timeout while other nodes sat empty). Given back sooner when the node
# changes (a taint or cordon lifted, its allocatable moved): the disagreement may be over.
WITHHOLD = 300.0
JUDGED = re.compile(r"\d+/\d+ nodes are")  # kube-scheduler's and Volcano's verdict on nodes


def node_view(node: Mapping[str, Any]) -> str:
    """What of a node decides whether a pod binds there (not its heartbeats)."""
    spec = node.get("spec") or {}
    allocatable = (node.get("status") or {}).get("allocatable")
    return json.dumps(
        [spec.get("taints"), spec.get("unschedulable"), allocatable], sort_keys=True, default=str
    )


# A start given up for the same reason again waits before the next try (issue 34: a job whose
# PVC was missing restarted every 60 s forever): the n-th time in a row, n >= 2, it is held
# BACKOFF_BASE * 2**(n-2) seconds, at most BACKOFF_MAX. The first time it is tried again at
# once (elsewhere: the node the scheduler refused is withheld).
BACKOFF_BASE = 60.0
BACKOFF_MAX = 3600.0
GIVEN_UP = (Reason.START_TIMEOUT.value, Reason.NOT_READY.value)


def start_backoff(times: int) -> float:
    """Seconds a job waits before its next start, after `times` starts in a row given up for
    the same reason."""
    if times < 2:
        return 0.0
    return min(BACKOFF_BASE * 2.0 ** min(times - 2, 32), BACKOFF_MAX)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def same_reason(text: str) -> str:
    """A give-up's reason without its numbers (pod names carry the attempt, the scheduler's
    verdict its node counts): what must repeat for the start to back off."""
    return re.sub(r"\d+", "#", text)


_MAX_REPORT = 256  # characters: a report is a number or a small JSON object
_CLOCK_SKEW = 300.0  # seconds a checkpoint time may lie ahead of the controller's clock


def read_reports(
    annotations: Mapping[str, Any], now: float
) -> tuple[float | None, float | None, str | None]:
    """(progress, checkpoint time, why a report was ignored) from a pod's annotations.

    Progress must be a finite number in [0, 1]; a checkpoint time (`{"time": unix}` or a
    bare number) finite, not negative, and not later than `now` plus some clock skew.
    Anything else is ignored, and the first problem returned as one line."""
    progress = at = None
    problem: str | None = None
    text = annotations.get(PROGRESS)
    if text is not None:
        try:
            value = float(str(text)[:_MAX_REPORT])
        except ValueError:
            value = math.nan
        if math.isfinite(value) and 0.0 <= value <= 1.0:
            progress = value
        else:
            problem = f"{PROGRESS}={str(text)[:40]!r} is not a fraction in [0, 1]"
    text = annotations.get(CHECKPOINT)
    if text is not None:
        try:
            data = json.loads(str(text)[:_MAX_REPORT])
            raw = data["time"] if isinstance(data, dict) else data
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                raise TypeError
            value = float(raw)
        except (ValueError, KeyError, TypeError, RecursionError):
            value = math.nan
        if math.isfinite(value) and 0.0 <= value <= now + _CLOCK_SKEW:
            at = value
        elif problem is None:
            problem = f"{CHECKPOINT}={str(text)[:40]!r} is not a past unix time"
    return progress, at, problem


def _owner(pod: Mapping[str, Any], owners: Mapping[str, str]) -> str | None:
    """The name of the TrainingJob (by uid, among `owners`) that controls `pod`, or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")
            and ref.get("uid") in owners
        ):
            return owners[str(ref["uid"])]
    return None


def claim_unlabelled(
    running: list[Object],
    listed: Iterable[Object],
    jobs: Iterable[Object],
    namespaces: Iterable[str],
) -> tuple[list[Object], list[Object]]:
    """Live pods a TrainingJob owns that lost caldera's labels (issue 34: removing
    `caldera.io/managed` made caldera start attempt 2 while attempt 1 ran on, beyond its
    reach). Ownership is the ownerReference to the TrainingJob's uid — which only the
    controller's create set — and the name caldera gave the pod (JOB-ATTEMPT-RANK); each
    comes back as a copy with caldera's labels restored, so it stays counted and stoppable.

    Returns (the claimed copies, `running` with each claimed pod replaced by its copy: the
    room it holds is then the job's, not a stranger's)."""
    served = set(namespaces)
    owners = {
        str((obj.get("metadata") or {}).get("uid")): str((obj.get("metadata") or {}).get("name"))
        for obj in jobs
    }
    seen = {
        ((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("name"))
        for p in listed
    }
    found: list[Object] = []
    for pod in running:
        metadata = pod.get("metadata") or {}
        namespace, name = metadata.get("namespace"), str(metadata.get("name", ""))
        if namespace not in served or (namespace, name) in seen:
            continue
        job = _owner(pod, owners)
        if job is None or not name.startswith(f"{job}-"):
            continue
        parts = name[len(job) + 1 :].split("-")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            continue
        labels = {
            **(metadata.get("labels") or {}),
            MANAGED: "true",
            JOB: job,
            ATTEMPT: parts[0],
            RANK: parts[1],
        }
        log.debug("pod %s/%s lost caldera's labels; still job %s's", namespace, name, job)
        found.append({**pod, "metadata": {**metadata, "labels": labels}})
    if not found:
        return found, list(running)
    copies = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in found}
    rest = [
        copies.get(
            ((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("name")), p
        )
        for p in running
    ]
    return found, rest


# -- what the watcher saw ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskEnded:
    """The task's pod ended (`finished`: Succeeded or Failed, with its exit code) or is gone
    unseen (deleted, evicted by a drain, its node lost: no exit code). `key`: its pod."""

    job: KubeJob
    task: KubeTask
    key: tuple[str, str]
    exit_code: int | None
    finished: bool


@dataclass(frozen=True, slots=True)
class TaskSeen:
    """The task's pod is there and live: bound to its node or not, being deleted or not."""

    job: KubeJob
    task: KubeTask
    key: tuple[str, str]
    bound: bool
    deleting: bool


@dataclass(frozen=True, slots=True)
class StuckTerminating:
    """A leaving or stopping pod is still there `over` seconds after its grace period, past
    `terminating_timeout`. `give_up` False: delete it again with grace 0; True (it was, and
    is still there after another timeout): the task counts as ended without it."""

    job: KubeJob
    task: KubeTask
    over: float
    give_up: bool


@dataclass(frozen=True, slots=True)
class Resend:
    """The task is recorded as leaving or stopping but its pod was not asked yet (a restart in
    between, or an API error)."""

    job: KubeJob
    task: KubeTask


@dataclass(frozen=True, slots=True)
class Reported:
    """What the job wrote on its pod `pod` (`read_reports`); `problem`: why a report was
    ignored."""

    job: KubeJob
    pod: str
    progress: float | None
    checkpoint_at: float | None
    problem: str | None


@dataclass(frozen=True, slots=True)
class GangRunning:
    """`pods` of the job's tasks run, at least `min_available`: useful work since `since`."""

    job: KubeJob
    since: float
    pods: int


@dataclass(frozen=True, slots=True)
class TasksEnded:
    """Tasks of the job ended: settle it. `stuck`: pods it moved on without, whose room stays
    held like an orphan's until they are gone."""

    job: KubeJob
    stuck: tuple[tuple[tuple[str, str], Object], ...] = ()


@dataclass(frozen=True, slots=True)
class StartGivenUp:
    """The job's start is given up (`late`: a pod never bound, never ran, or was deleted by
    someone else); `message`: the Event's text, with what follows."""

    job: KubeJob
    reason: Reason
    late: str
    message: str


@dataclass(frozen=True, slots=True)
class StartHeld:
    """A requeued job whose starts keep being given up waits before its next try: `why`."""

    job: KubeJob
    why: str


@dataclass(frozen=True, slots=True)
class StartReleased:
    """A job held by `StartHeld` may be tried again."""

    job: KubeJob


@dataclass(frozen=True, slots=True)
class OrphanHeld:
    """A caldera pod no job claims: its room stays taken until it is gone."""

    key: tuple[str, str]
    pod: Object


@dataclass(frozen=True, slots=True)
class OrphanReleased:
    """An orphan pod ended or is gone: its room is free."""

    key: tuple[str, str]


@dataclass(frozen=True, slots=True)
class OrphanRemoved:
    """An orphan pod to delete with `grace` seconds (0: an ended one, garbage)."""

    key: tuple[str, str]
    grace: int


PodObservation = (
    TaskEnded
    | TaskSeen
    | StuckTerminating
    | Resend
    | Reported
    | GangRunning
    | TasksEnded
    | StartGivenUp
    | StartHeld
    | StartReleased
    | OrphanHeld
    | OrphanReleased
    | OrphanRemoved
)
