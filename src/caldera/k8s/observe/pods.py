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

The watcher changes nothing in the runtime: `PodWatcher.observe` yields what it saw as
typed observations (`caldera.k8s.observe.podfacts`) and the runtime applies each
(`caldera.k8s.observe.podapply`) before the watcher goes on, so the next look sees what the last
one changed. The watcher keeps only its own memory: the nodes it withholds, the starts it
gave up, the orphans it already deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from caldera.k8s.cluster.api import Object
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.observe.podfacts import (
    BACKOFF_BASE,
    BACKOFF_MAX,
    ENDED,
    EXPECT,
    GIVEN_UP,
    JUDGED,
    WITHHOLD,
    GangRunning,
    OrphanHeld,
    OrphanReleased,
    OrphanRemoved,
    PodObservation,
    Reported,
    Resend,
    StartGivenUp,
    StartHeld,
    StartReleased,
    StuckTerminating,
    TaskEnded,
    TaskSeen,
    TasksEnded,
    claim_unlabelled,
    exit_code,
    node_view,
    ordinal,
    read_reports,
    same_reason,
    start_backoff,
    started_at,
    unscheduled_reason,
    waiting_reason,
)
from caldera.k8s.reporting.events import Reason
from caldera.k8s.reporting.status import duration_text
from caldera.model import JobState
from caldera.trainingjob_api import JOB

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


class PodWatcher:
    """Reads the runtime's jobs and the pods listed; yields what it saw (see the module)."""

    def __init__(self, runtime: KubeRuntime) -> None:
        self.runtime = runtime
        self._collected: set[tuple[str, str]] = set()  # ended orphans already deleted
        # node → (until when its free room is withheld, the node as it was then)
        self.suspect: dict[str, tuple[float, str]] = {}
        # job id → (the reason its starts were given up for, times in a row, held until, why)
        self.given_up: dict[str, tuple[str, int, float, str]] = {}

    def withhold(self, node: str, now: float) -> None:
        found = [n for n in self.runtime.reads.nodes() if n["metadata"]["name"] == node]
        self.suspect[node] = (now + WITHHOLD, node_view(found[0]) if found else "")

    def withheld(self, now: float) -> frozenset[str]:
        """Nodes whose free room new starts may not use now (see `WITHHOLD`)."""
        if not self.suspect:
            return frozenset()
        views = {n["metadata"]["name"]: node_view(n) for n in self.runtime.reads.nodes()}
        for node, (until, view) in list(self.suspect.items()):
            if until <= now or views.get(node, view) != view:
                del self.suspect[node]
        return frozenset(self.suspect)

    def observe(self, pods: list[Object], now: float) -> Iterator[PodObservation]:
        """What `pods` (caldera's, as listed) say of the runtime's jobs, in order. The caller
        applies each observation before asking for the next."""
        runtime = self.runtime
        by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        unclaimed = dict(by_key)
        for job in list(runtime.jobs.values()):
            yield from self._job(job, unclaimed, by_key, now)
        for key, pod in unclaimed.items():
            yield from self._orphan(key, pod)
        for key in [k for k in runtime.orphans if k not in by_key]:
            yield OrphanReleased(key)
        self._collected &= set(by_key)
        yield from self._back_off(now)

    def _back_off(self, now: float) -> Iterator[StartHeld | StartReleased]:
        """Hold a requeued job whose starts keep being given up for the same reason until its
        next try (`start_backoff`), said as its status.reason and a Held Event; release it
        then. A job that ran, or is gone, starts afresh. A hold of this kind with no record
        (a restarted controller) is released at once: the next try is the record."""
        runtime = self.runtime
        for job_id in [j for j in self.given_up if j not in runtime.jobs]:
            del self.given_up[job_id]
        for job in runtime.jobs.values():
            record = self.given_up.get(job.id)
            if job.state is JobState.RUNNING and job.running_since is not None:
                self.given_up.pop(job.id, None)
            elif job.state is JobState.PENDING and record and record[2] > now:
                yield StartHeld(job, f"{record[3]}; next try in {duration_text(record[2] - now)}")
            elif (
                job.state is JobState.HELD
                and (job.hold_reason or "").startswith(GIVEN_UP)
                and (record is None or record[2] <= now)
            ):
                yield StartReleased(job)

    def _job(
        self,
        job: KubeJob,
        unclaimed: dict[tuple[str, str], Object],
        pods: Mapping[tuple[str, str], Object],
        now: float,
    ) -> Iterator[PodObservation]:
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
            if pod is None:
                made = runtime.actuator.expected.get(key)
                if made is not None and now - made < EXPECT:
                    continue  # created a moment ago; the reads have not seen it yet
                yield TaskEnded(job, task, key, None, False)  # deleted, evicted, node lost
                changed = True
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase in ENDED:
                yield TaskEnded(job, task, key, exit_code(pod), True)
                changed = True
                continue
            deleting = "deletionTimestamp" in pod["metadata"]
            yield TaskSeen(job, task, key, bool(pod["spec"].get("nodeName")), deleting)
            if deleting and task.kill_at is not None:
                seen = self._stuck(job, task, now)
                if seen is not None:
                    yield seen
                    if seen.give_up:
                        stuck.append((key, pod))
                        changed = True
                        continue
            if deleting and not (task.leaving or task.kill_at is not None):
                # Someone else deletes a running task's pod (a drain, kubectl, the node
                # lifecycle controller): the task is ending, so is its gang.
                late = late or f"pod {task.pod} is being deleted by someone else"
            if (task.leaving or task.kill_at is not None) and not deleting and not task.resent:
                yield Resend(job, task)
            waited = now - task.created_at
            if not (task.leaving or task.kill_at is not None):
                if not task.bound and waited > settings.bind_timeout:
                    said = unscheduled_reason(pod)
                    late = late or (
                        f"pod {task.pod} not bound to its node in {settings.bind_timeout:g} s"
                        + (f" ({said})" if said else "")
                    )
                    node = self._node_name(task)
                    if node is not None and JUDGED.search(said):
                        # The scheduler judged the node itself ("0/4 nodes are available: 1
                        # Insufficient nvidia.com/gpu …"), not only the gang being incomplete.
                        self.withhold(node, now)
                elif task.bound and phase != "Running" and waited > settings.ready_timeout:
                    late = late or (
                        f"pod {task.pod} not running {settings.ready_timeout:g} s after its "
                        f"start ({waiting_reason(pod)})"
                    )
            progress, at, problem = read_reports(pod["metadata"].get("annotations") or {}, now)
            if progress is not None or at is not None or problem is not None:
                yield Reported(job, str(pod["metadata"].get("name")), progress, at, problem)
        running = self._running(job, pods, now)
        if running is not None:
            yield running
        if changed:
            yield TasksEnded(job, tuple(stuck))
        elif late is not None and job.state is JobState.RUNNING:
            yield self._give_up(job, late, now)

    def _give_up(self, job: KubeJob, late: str, now: float) -> StartGivenUp:
        """The start of `job` is given up for `late`; counted in a row with the same reason
        (`start_backoff`)."""
        reason = Reason.START_TIMEOUT if "not bound" in late else Reason.NOT_READY
        then = "stopping the gang, requeued"
        if reason is Reason.START_TIMEOUT and self.suspect:
            then += f"; node(s) {', '.join(sorted(self.suspect))} withheld {WITHHOLD:.0f} s"
        same = same_reason(f"{reason.value}: {late}")
        known = self.given_up.get(job.id)
        times = known[1] + 1 if known is not None and known[0] == same else 1
        wait = start_backoff(times)
        why = f"{reason.value} {ordinal(times)} time: {late}"
        self.given_up[job.id] = (same, times, now + wait, why)
        if wait:
            then += f"; {reason.value} {ordinal(times)} time: next try in {duration_text(wait)}"
        return StartGivenUp(job, reason, late, f"{late}: {then}")

    def _node_name(self, task: KubeTask) -> str | None:
        nodes = self.runtime.nodes
        index = task.placement.node
        return nodes[index].name if 0 <= index < len(nodes) else None

    def _stuck(self, job: KubeJob, task: KubeTask, now: float) -> StuckTerminating | None:
        """A leaving or stopping pod still there `terminating_timeout` after its grace period
        (issue 9, defect 6: its preemptor waited forever). First it is deleted again with
        grace 0 — the API server then removes a pod whose node never confirms at once. If it
        is still there after another timeout (a finalizer holds it), the job moves on: the task
        counts as ended, so its gang is requeued and the cycle re-plans the preemptor around
        the room the pod still holds. None: not yet."""
        assert task.kill_at is not None
        over = now - task.kill_at
        timeout = self.runtime.settings.terminating_timeout
        if over <= timeout:
            return None
        if not task.forced:
            return StuckTerminating(job, task, over, give_up=False)
        if over <= 2 * timeout:
            return None
        return StuckTerminating(job, task, over, give_up=True)

    def _orphan(self, key: tuple[str, str], pod: Object) -> Iterator[PodObservation]:
        """A caldera pod no job claims (its job was deleted or ended, or an old attempt)."""
        runtime = self.runtime
        phase = (pod.get("status") or {}).get("phase")
        job = (pod["metadata"].get("labels") or {}).get(JOB, "")
        ready = getattr(runtime.reads, "ready", None)  # an informer cache says; a listing has
        if ready is not None and not ready(key[0]):
            yield OrphanHeld(key, pod)  # its namespace's jobs are not read yet: touch nothing
            return
        if phase in ENDED:
            yield OrphanReleased(key)
            if (key[0], job) not in runtime.intake.unreadable and key not in self._collected:
                self._collected.add(key)  # garbage: an ended pod of a settled attempt
                yield OrphanRemoved(key, 0)
            return
        yield OrphanHeld(key, pod)
        if (key[0], job) in runtime.intake.unreadable:
            return  # its TrainingJob exists but cannot be read: hold the room, touch nothing
        if "deletionTimestamp" not in pod["metadata"] and key not in self._collected:
            self._collected.add(key)
            grace = int(pod["spec"].get("terminationGracePeriodSeconds") or runtime.grace)
            yield OrphanRemoved(key, grace)

    def _running(
        self, job: KubeJob, pods: Mapping[tuple[str, str], Object], now: float
    ) -> GangRunning | None:
        """Useful work starts when `min_available` tasks' containers run, not at the start
        decision: images take time to pull."""
        if job.state is not JobState.RUNNING or job.running_since is not None:
            return None
        starts = []
        for task in job.running:
            pod = pods.get((job.namespace, task.pod))
            if task.done or pod is None or (pod.get("status") or {}).get("phase") != "Running":
                continue
            starts.append(started_at(pod) or now)
        if len(starts) >= job.spec.min_available:
            return GangRunning(job, min(max(starts), now), len(starts))
        return None
