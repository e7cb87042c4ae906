"""TrainingJobs into jobs: admit new ones, take back running ones, forget deleted ones.

- A TrainingJob without a status is new: the platform layer (DESIGN §7) reads it
  (`caldera.k8s.reading.trainingjob`: namespace binding, queue, critical, pod templates), then the
  core's admission accepts, holds or rejects it. Its status is written by the controller
  alone; the API server dropped any a user sent (status subresource), so a status the
  controller finds is one it wrote.
- A TrainingJob whose status says Pending, Held, Running or Releasing is one a previous
  controller ran (restart, fail-over): the job is rebuilt from its spec (immutable) and the
  status, its tasks from the pods of its current attempt (placement, rank, deletion), and
  tasks whose pods vanished meanwhile are counted lost (the gang is stopped and requeued).
- A new TrainingJob whose templates read the namespace's Secrets, ConfigMaps or PVCs is
  admitted only where caldera's admission policy checked them against its submitter's own
  rights (`caldera.k8s.access.admission.policy_problem`): Kubernetes records no creator to ask a
  SubjectAccessReview about, and the pods would read them with the controller's rights.
  Elsewhere it is Rejected, naming the reference (issue 34).
- A job whose TrainingJob is gone was cancelled by its owner: its pods (owned by the
  TrainingJob) are deleted by the garbage collector; their room stays taken until they are.

The intake only reads — the TrainingJobs, their pods and what the runtime knows — and says
what it found as typed observations (`caldera.k8s.observe.intakefacts`); the runtime applies each
(`caldera.k8s.observe.intakeapply`) before the next is made, as with the pod watcher's.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from caldera.core import admit
from caldera.errors import ClusterUnavailable, Forbidden, RecordError, RenderError
from caldera.k8s import names
from caldera.k8s.access.admission import POLICY_NAME, policy_problem
from caldera.k8s.cluster.api import Object, from_rfc3339
from caldera.k8s.jobs import KubeJob, pod_attempt, task_from_pod
from caldera.k8s.observe.intakefacts import (
    IntakeObservation,
    JobAdmitted,
    JobGone,
    JobRefused,
    JobTakenBack,
    SettledSeen,
    SettledThere,
)
from caldera.k8s.reading.trainingjob import read_training_job
from caldera.k8s.reporting.status import restore, submit_time
from caldera.model import JobState
from caldera.model.lifecycle import TERMINAL
from caldera.trainingjob_api import JOB

if TYPE_CHECKING:
    from caldera.k8s.runtime import KubeRuntime

__all__ = ["Intake"]

log = logging.getLogger("caldera.k8s")

_FINAL = frozenset(state.value for state in TERMINAL)
# How long one read of the admission policy answers for jobs created before it (jobs arriving
# together ask once; a job created after the read asks again).
_POLICY_FRESH = 10.0


def _one_line(error: BaseException) -> str:
    """An unexpected error as one short line for a status and an Event."""
    text = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Intake:
    def __init__(self, runtime: KubeRuntime) -> None:
        self.runtime = runtime
        # (namespace, job name) whose TrainingJob exists but cannot be taken back: its pods
        # are left alone (their room stays taken) rather than guessed about.
        self.unreadable: set[tuple[str, str]] = set()
        # (when read, policy, binding): caldera's admission policy as last read.
        self._policy: tuple[float, Any, Any] | None = None

    def reconcile(
        self, objects: Iterable[Object], pods: Iterable[Object], now: float
    ) -> Iterator[IntakeObservation]:
        """What the TrainingJobs show, one observation at a time; the caller applies each
        before asking for the next (a job deleted and re-created between two looks is
        forgotten, then taken in)."""
        runtime = self.runtime
        by_job: dict[tuple[str, str], list[Object]] = {}
        for pod in pods:
            metadata = pod["metadata"]
            job = (metadata.get("labels") or {}).get(JOB)
            if job:
                by_job.setdefault((metadata["namespace"], job), []).append(pod)
        present: set[str] = set()
        uids: set[str] = set()
        self.unreadable = set()
        for obj in objects:
            metadata = obj.get("metadata") or {}
            namespace, name, uid = (str(metadata.get(k, "")) for k in ("namespace", "name", "uid"))
            uids.add(uid)
            job_id = names.job_id(namespace, name)
            present.add(job_id)
            known = runtime.jobs.get(job_id)
            if known is not None:
                if known.uid == uid:
                    continue
                yield JobGone(known)  # deleted and re-created between two looks
            try:
                found = self._take(obj, job_id, by_job.get((namespace, name), []), now)
            except Exception as error:  # one tenant's object never stops the rest (issue 34)
                log.exception("%s could not be taken in", job_id)
                if (obj.get("status") or {}).get("state"):
                    self.unreadable.add((namespace, name))
                else:
                    yield JobRefused(obj, f"cannot be read: {_one_line(error)}")
                continue
            if found is not None:
                yield found
        for job_id, job in list(runtime.jobs.items()):
            if job_id not in present:
                yield JobGone(job)
        yield SettledThere(frozenset(uids))  # deleted ones are gone for good

    def newcomers(
        self, objects: Iterable[Object], now: float
    ) -> Iterator[JobAdmitted | JobRefused]:
        """The new TrainingJobs among `objects` — no status, not known, not settled —
        admitted or refused: what a long flush takes in while it writes (issue 40). The
        rest waits for the next step's `reconcile`."""
        runtime = self.runtime
        for obj in objects:
            metadata = obj.get("metadata") or {}
            namespace, name = (str(metadata.get(k, "")) for k in ("namespace", "name"))
            job_id = names.job_id(namespace, name)
            if (
                job_id in runtime.jobs
                or (obj.get("status") or {}).get("state")
                or metadata.get("uid") in runtime.actuator.settled
            ):
                continue
            try:
                taken = self.admit(obj, now)
            except Exception:  # the next step's intake takes it in, or says why not
                log.exception("%s could not be admitted during a flush", job_id)
                continue
            if taken is not None:
                yield taken

    def _take(
        self, obj: Object, job_id: str, pods: list[Object], now: float
    ) -> IntakeObservation | None:
        """Admit a new TrainingJob or take back one a previous controller ran."""
        metadata = obj["metadata"]
        namespace, name, uid = metadata["namespace"], metadata["name"], metadata["uid"]
        status = obj.get("status") or {}
        if uid in self.runtime.actuator.settled:
            if status.get("state") in _FINAL:
                return SettledSeen(uid)  # the cache caught up with what was written
            return None
        if not status.get("state"):
            return self.admit(obj, now)
        try:
            state = JobState(status["state"])
        except ValueError:
            log.error("%s has an unreadable status.state %r", job_id, status["state"])
            self.unreadable.add((namespace, name))
            return None
        if state not in TERMINAL:
            return self.load(obj, status, state, pods, now)
        return None

    def admit(self, obj: Object, now: float) -> JobAdmitted | JobRefused | None:
        """The platform layer (DESIGN §7): accept, hold or reject a new TrainingJob. None:
        it cannot be told now (the admission policy unreadable), asked again at the next
        look."""
        runtime = self.runtime
        created = obj["metadata"].get("creationTimestamp")
        # Submitted when it was created, not when a controller first saw it: a job applied
        # while the controller was away keeps its place in its queue.
        submit = min(from_rfc3339(str(created)), now) if created else now
        try:
            accepted = read_training_job(obj, runtime.settings, runtime.queues, submit)
            accepted.workload.check(runtime.settings)
        except (RecordError, RenderError) as error:
            return JobRefused(obj, str(error))
        if accepted.references:
            try:
                unchecked = self._unchecked(accepted.references[0], submit, now)
            except ClusterUnavailable as error:  # asked again at the next look
                log.warning("cannot read the admission policy: %s", error)
                return None
            if unchecked:
                return JobRefused(obj, unchecked)
        spec = accepted.spec
        admission = admit(
            spec,
            runtime.queues,
            runtime.throttles,
            now,
            runtime.nodes,
            runtime.policy_config.week_offset,
        )
        if admission.state is JobState.REJECTED:
            return JobRefused(obj, admission.reason)
        job = self._job(obj, accepted.spec, accepted.workload, admission.state)
        held = admission.reason if admission.state is JobState.HELD else None
        return JobAdmitted(job, held)

    def _unchecked(self, reference: str, created: float, now: float) -> str | None:
        """Why a template's `reference` was not checked against its submitter's rights, as a
        one-line reason, or None when the admission policy checked it."""
        cached = self._policy
        if cached is None or now - cached[0] > _POLICY_FRESH or cached[0] < created:
            try:
                policy, binding = self.runtime.api.read_admission_policy(POLICY_NAME)
            except Forbidden:  # a controller without the chart's RBAC: cannot tell
                policy = binding = None
            cached = self._policy = (now, policy, binding)
        problem = policy_problem(cached[1], cached[2], created)
        if problem is None:
            return None
        return (
            f"{reference}: caldera cannot check that its submitter may get it: {problem} "
            "(install caldera's admission policy, or use no Secret, ConfigMap or PVC)"
        )

    def load(
        self, obj: Object, status: dict[str, Any], state: JobState, pods: list[Object], now: float
    ) -> JobTakenBack | None:
        """Rebuild a job a previous controller was running (restart, fail-over): its spec as
        admitted, its status, its current attempt's tasks from their pods."""
        runtime = self.runtime
        metadata = obj["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        submit = submit_time(status) or now
        admitted = copy.deepcopy(obj)
        if status.get("queue"):
            admitted["spec"]["queue"] = status["queue"]  # the queue it was admitted to
        try:
            accepted = read_training_job(admitted, runtime.settings, runtime.queues, submit)
        except RecordError as error:
            log.error("%s/%s can no longer be read: %s", namespace, name, error)
            self.unreadable.add((namespace, name))
            return None
        job = self._job(obj, accepted.spec, accepted.workload, state)
        restore(job, status, runtime.keys)
        leaving = set((status.get("controller") or {}).get("leaving") or [])
        for pod in pods:
            task = task_from_pod(pod, runtime.keys)
            if task is None or task.attempt != job.attempts:
                continue  # another attempt's, or its node is gone: the pod watcher sees it
            task.leaving = state is JobState.RELEASING or task.rank in leaving
            if task.leaving and task.kill_at is None:
                task.kill_at = now + runtime.policy_config.grace_period
            job.tasks.append(task)
        job.tasks.sort(key=lambda t: t.rank)
        job.lost_tasks = max(job.expected_tasks - len(job.tasks), 0)
        if state is JobState.PENDING:
            # Pods of a start whose status had not followed them yet (the controller stopped
            # in between: `caldera.k8s.effects.flush`) are orphans, deleted by the pod
            # watcher, their room held until gone; the job's next start is a later attempt,
            # under other names, never mistaken for them.
            job.attempts = max([job.attempts, *(pod_attempt(pod) for pod in pods)])
        return JobTakenBack(job)

    def _job(self, obj: Object, spec: Any, workload: Any, state: JobState) -> KubeJob:
        metadata = obj["metadata"]
        return KubeJob(
            spec=spec,
            state=state,
            namespace=metadata["namespace"],
            name=metadata["name"],
            uid=metadata["uid"],
            workload=workload,
            generation=int(metadata.get("generation") or 1),
        )
