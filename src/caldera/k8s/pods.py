"""Pods into task facts: which tasks ended, were bound, run, or were deleted by someone else.

For each live job, each task's pod says:
- gone → the task ended, unseen (deleted, evicted by a drain, its node lost);
- Succeeded / Failed → ended with its container's exit code;
- bound to its node → the start is under way; running → once `min_available` of them run,
  the gang makes progress (its useful work resumes from what was saved);
- deleted by someone else while it runs (a drain, `kubectl delete`) → its gang cannot run
  whole: the rest is stopped and the job requeued;
- not bound within `bind_timeout` (the scheduler disagreed with caldera's view), or bound
  but not running within `ready_timeout` (an image that never pulls: Kueue's
  `waitForPodsReady` is the model) → the start is given up, the job requeued, with an Event;
  given up again for the same reason, the job is held before its next try, longer each time
  (`start_backoff`: 1 min, 2, 4, … up to an hour), and its status.reason says so;
- a job's reports on its own pod: `caldera.io/progress`, `caldera.io/checkpoint`.
Then the kernel settles each job whose tasks ended.

Pods with caldera's label that no job claims are orphans: left from an old attempt or a
deleted job. Their room stays taken until they are gone; running ones are deleted (never
those of a TrainingJob that exists but cannot be read), ended ones are garbage-collected.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from caldera.k8s.api import Object, from_rfc3339
from caldera.k8s.events import Reason
from caldera.k8s.guard import Purpose
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.status import duration_text
from caldera.model import JobState
from caldera.runtime import EventKind
from caldera.trainingjob_api import ATTEMPT, CHECKPOINT, GROUP, JOB, KIND, MANAGED, PROGRESS, RANK

if TYPE_CHECKING:
    from caldera.k8s.runtime import KubeRuntime

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "PodWatcher",
    "claim_unlabelled",
    "exit_code",
    "ordinal",
    "read_reports",
    "start_backoff",
    "started_at",
]

log = logging.getLogger("caldera.k8s")

_ENDED = ("Succeeded", "Failed")
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


def _waiting_reason(pod: Mapping[str, Any]) -> str:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _unscheduled_reason(pod: Mapping[str, Any]) -> str:
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
_JUDGED = re.compile(r"\d+/\d+ nodes are")  # kube-scheduler's and Volcano's verdict on nodes


def _node_view(node: Mapping[str, Any]) -> str:
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
_GIVEN_UP = (Reason.START_TIMEOUT.value, Reason.NOT_READY.value)


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


def _same_reason(text: str) -> str:
    """A give-up's reason without its numbers (pod names carry the attempt, the scheduler's
    verdict its node counts): what must repeat for the start to back off."""
    return re.sub(r"\d+", "#", text)


class PodWatcher:
    def __init__(self, runtime: KubeRuntime) -> None:
        self.runtime = runtime
        self._collected: set[tuple[str, str]] = set()  # ended orphans already deleted
        # node → (until when its free room is withheld, the node as it was then)
        self.suspect: dict[str, tuple[float, str]] = {}
        # job id → (the reason its starts were given up for, times in a row, held until, why)
        self.given_up: dict[str, tuple[str, int, float, str]] = {}

    def withhold(self, node: str, now: float) -> None:
        found = [n for n in self.runtime.reads.nodes() if n["metadata"]["name"] == node]
        self.suspect[node] = (now + WITHHOLD, _node_view(found[0]) if found else "")

    def withheld(self, now: float) -> frozenset[str]:
        """Nodes whose free room new starts may not use now (see `WITHHOLD`)."""
        if not self.suspect:
            return frozenset()
        views = {n["metadata"]["name"]: _node_view(n) for n in self.runtime.reads.nodes()}
        for node, (until, view) in list(self.suspect.items()):
            if until <= now or views.get(node, view) != view:
                del self.suspect[node]
        return frozenset(self.suspect)

    def reconcile(self, pods: list[Object], now: float) -> None:
        runtime = self.runtime
        by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        unclaimed = dict(by_key)
        for job in list(runtime.jobs.values()):
            self._job(job, unclaimed, by_key, now)
        for key, pod in unclaimed.items():
            self._orphan(key, pod)
        for key in [k for k in runtime.orphans if k not in by_key]:
            runtime.release_orphan(key)
        self._collected &= set(by_key)
        self._back_off(now)

    def _back_off(self, now: float) -> None:
        """Hold a requeued job whose starts keep being given up for the same reason until its
        next try (`start_backoff`), said as its status.reason and a Held Event; release it
        then. A job that ran, or is gone, starts afresh. A hold of this kind with no record
        (a restarted controller) is released at once: the next try is the record."""
        runtime = self.runtime
        kernel = runtime.kernel
        for job_id in [j for j in self.given_up if j not in runtime.jobs]:
            del self.given_up[job_id]
        for job in runtime.jobs.values():
            record = self.given_up.get(job.id)
            if job.state is JobState.RUNNING and job.running_since is not None:
                self.given_up.pop(job.id, None)
            elif job.state is JobState.PENDING and record and record[2] > now:
                kernel.set_state(job, JobState.HELD)
                job.hold_reason = f"{record[3]}; next try in {duration_text(record[2] - now)}"
                job.hold_since = now
                runtime.actuator.record(EventKind.HOLD, job, now, reason=job.hold_reason)
            elif (
                job.state is JobState.HELD
                and (job.hold_reason or "").startswith(_GIVEN_UP)
                and (record is None or record[2] <= now)
            ):
                job.hold_reason = job.hold_since = None
                kernel.set_state(job, JobState.PENDING)
                runtime.actuator.record(EventKind.RELEASE, job, now, reason="next try")
                runtime.cycle_needed = True

    def _job(
        self,
        job: KubeJob,
        unclaimed: dict[tuple[str, str], Object],
        pods: Mapping[tuple[str, str], Object],
        now: float,
    ) -> None:
        runtime = self.runtime
        settings = runtime.settings
        changed = False
        late: str | None = None
        stuck: list[tuple[tuple[str, str], Object]] = []  # pods the job moves on without
        for task in job.tasks:
            if task.done:
                continue
            key = (job.namespace, task.pod)
            pod = unclaimed.pop(key, None)
            expected = runtime.actuator.expected
            if pod is None:
                made = expected.get(key)
                if made is not None and now - made < EXPECT:
                    continue  # created a moment ago; the reads have not seen it yet
                expected.pop(key, None)
                task.done, task.exit_code = True, None  # gone: deleted, evicted, node lost
                changed = True
                continue
            expected.pop(key, None)
            phase = (pod.get("status") or {}).get("phase")
            if phase in _ENDED:
                task.done, task.exit_code = True, exit_code(pod)
                task.finished = True
                changed = True
                continue
            if pod["spec"].get("nodeName") and not task.bound:
                task.bound = True
                runtime.kernel.mark(job)
            deleting = "deletionTimestamp" in pod["metadata"]
            task.deleting = deleting
            if deleting and task.kill_at is not None and self._stuck(job, task, now):
                stuck.append((key, pod))
                changed = True
                continue
            if deleting and not (task.leaving or task.kill_at is not None):
                # Someone else deletes a running task's pod (a drain, kubectl, the node
                # lifecycle controller): the task is ending, so is its gang.
                late = late or f"pod {task.pod} is being deleted by someone else"
            if (task.leaving or task.kill_at is not None) and not deleting:
                self._resend(job, task)
            waited = now - task.created_at
            if not (task.leaving or task.kill_at is not None):
                if not task.bound and waited > settings.bind_timeout:
                    said = _unscheduled_reason(pod)
                    late = late or (
                        f"pod {task.pod} not bound to its node in {settings.bind_timeout:g} s"
                        + (f" ({said})" if said else "")
                    )
                    node = self._node_name(task)
                    if node is not None and _JUDGED.search(said):
                        # The scheduler judged the node itself ("0/4 nodes are available: 1
                        # Insufficient nvidia.com/gpu …"), not only the gang being incomplete.
                        self.withhold(node, now)
                elif task.bound and phase != "Running" and waited > settings.ready_timeout:
                    late = late or (
                        f"pod {task.pod} not running {settings.ready_timeout:g} s after its "
                        f"start ({_waiting_reason(pod)})"
                    )
            self._reports(job, pod, now)
        self._note_running(job, pods, now)
        if changed:
            runtime.settle(job)
            for key, pod in stuck:  # its room is not free: held like an orphan's until gone
                runtime.hold_orphan(key, pod)
        elif late is not None and job.state is JobState.RUNNING:
            log.warning("%s: %s; giving the start up", job.id, late)
            reason = Reason.START_TIMEOUT if "not bound" in late else Reason.NOT_READY
            then = "stopping the gang, requeued"
            if reason is Reason.START_TIMEOUT and self.suspect:
                then += f"; node(s) {', '.join(sorted(self.suspect))} withheld {WITHHOLD:.0f} s"
            same = _same_reason(f"{reason.value}: {late}")
            known = self.given_up.get(job.id)
            times = known[1] + 1 if known is not None and known[0] == same else 1
            wait = start_backoff(times)
            why = f"{reason.value} {ordinal(times)} time: {late}"
            self.given_up[job.id] = (same, times, now + wait, why)
            if wait:
                then += f"; {reason.value} {ordinal(times)} time: next try in {duration_text(wait)}"
            runtime.actuator.note(reason, job, now, f"{late}: {then}")
            runtime.stop_gang(job, now)

    def _node_name(self, task: KubeTask) -> str | None:
        nodes = self.runtime.nodes
        index = task.placement.node
        return nodes[index].name if 0 <= index < len(nodes) else None

    def _stuck(self, job: KubeJob, task: KubeTask, now: float) -> bool:
        """A leaving or stopping pod still there `terminating_timeout` after its grace period
        (issue 9, defect 6: its preemptor waited forever). First it is deleted again with
        grace 0 — the API server then removes a pod whose node never confirms at once. If it
        is still there after another timeout (a finalizer holds it), the job moves on: the task
        counts as ended (True), so its gang is requeued and the cycle re-plans the preemptor
        around the room the pod still holds."""
        assert task.kill_at is not None
        over = now - task.kill_at
        timeout = self.runtime.settings.terminating_timeout
        actuator = self.runtime.actuator
        if over <= timeout:
            return False
        if not task.forced:
            task.forced = True
            actuator.remove(job, job.namespace, task.pod, 0, Purpose.FORCE)
            actuator.note(
                Reason.STUCK_TERMINATING,
                job,
                now,
                f"pod {task.pod} still terminating {over:.0f} s after its grace period: "
                "deleted with grace period 0",
            )
            return False
        if over <= 2 * timeout:
            return False
        log.warning("%s: pod %s stuck terminating; moving on without it", job.id, task.pod)
        actuator.note(
            Reason.STUCK_TERMINATING,
            job,
            now,
            f"pod {task.pod} still there {over:.0f} s after its grace period (a finalizer?): "
            "the job moves on; the pod's room stays held until it is gone",
        )
        task.done, task.exit_code = True, None
        self.runtime.replan_around(job)
        return True

    def _resend(self, job: KubeJob, task: KubeTask) -> None:
        """Recorded as leaving (or stopping) but its pod was not asked yet (a restart in
        between, or an API error): ask now."""
        if task.resent:
            return
        task.resent = True
        purpose = Purpose.EVICT if task.leaving else Purpose.STOP
        self.runtime.actuator.remove(job, job.namespace, task.pod, self.runtime.grace, purpose)

    def _orphan(self, key: tuple[str, str], pod: Object) -> None:
        """A caldera pod no job claims (its job was deleted or ended, or an old attempt)."""
        runtime = self.runtime
        phase = (pod.get("status") or {}).get("phase")
        job = (pod["metadata"].get("labels") or {}).get(JOB, "")
        ready = getattr(runtime.reads, "ready", None)  # an informer cache says; a listing has
        if ready is not None and not ready(key[0]):
            runtime.hold_orphan(key, pod)  # its namespace's jobs are not read yet: touch nothing
            return
        if phase in _ENDED:
            runtime.release_orphan(key)
            if (key[0], job) not in runtime.intake.unreadable and key not in self._collected:
                self._collected.add(key)  # garbage: an ended pod of a settled attempt
                runtime.remove_pod(None, key, 0, Purpose.CLEANUP)
            return
        runtime.hold_orphan(key, pod)
        if (key[0], job) in runtime.intake.unreadable:
            return  # its TrainingJob exists but cannot be read: hold the room, touch nothing
        if "deletionTimestamp" not in pod["metadata"] and key not in self._collected:
            self._collected.add(key)
            grace = int(pod["spec"].get("terminationGracePeriodSeconds") or runtime.grace)
            runtime.remove_pod(None, key, grace, Purpose.CLEANUP)

    def _note_running(
        self, job: KubeJob, pods: Mapping[tuple[str, str], Object], now: float
    ) -> None:
        """Useful work starts when `min_available` tasks' containers run, not at the start
        decision: images take time to pull."""
        if job.state is not JobState.RUNNING or job.running_since is not None:
            return
        starts = []
        for task in job.running:
            pod = pods.get((job.namespace, task.pod))
            if task.done or pod is None or (pod.get("status") or {}).get("phase") != "Running":
                continue
            starts.append(started_at(pod) or now)
        if len(starts) >= job.spec.min_available:
            self.runtime.kernel.begin_progress(job, min(max(starts), now))
            self.runtime.actuator.record(Reason.RUNNING, job, now, pods=len(starts))

    def _reports(self, job: KubeJob, pod: Object, now: float) -> None:
        """Progress and checkpoints a job wrote on its own pod (optional), read by
        `read_reports`: a value it cannot use changes nothing and is said once, as a
        Warning Event (issue 34: `progress=nan` made a job immune to preemption)."""
        annotations = pod["metadata"].get("annotations") or {}
        progress, at, problem = read_reports(annotations, now)
        if problem is not None and problem != job.bad_report:
            job.bad_report = problem
            log.warning("%s: pod %s: %s", job.id, pod["metadata"].get("name"), problem)
            self.runtime.actuator.note(Reason.BAD_REPORT, job, now, f"ignored: {problem}")
        if progress is not None and progress != job.reported_progress:
            job.reported_progress = progress
            self.runtime.kernel.mark(job)
        if at is not None and at > (job.checkpoint_seen or 0.0):
            job.checkpoint_seen = at
            job.saved_work = max(job.saved_work, job.work_done(min(at, now)))
            self.runtime.kernel.mark(job)


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
