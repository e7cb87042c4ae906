"""Carrying out one intent of the actuator: a create, a pod removal, a clean-up.

`caldera.k8s.effects.actuator.KubeActuator` queues typed intents (`Create`, `Remove`, `Cleanup`) and
writes them in rounds (statuses first, then intents, then Events); what one intent does on
the API server, and what its answer changes (a refused create stops its gang, a pod caldera
created is expected, a refused eviction is rolled back, a removal the guard forbids is
counted), is here, in `IntentCarrier`, which the actuator is built on.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from caldera.errors import NotFound
from caldera.k8s.cluster.api import (
    ClusterAPI,
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    EvictionBlocked,
    Invalid,
    Object,
    QuotaExceeded,
)
from caldera.k8s.effects.guard import Purpose, refusal
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.reporting.events import Reason
from caldera.trainingjob_api import ATTEMPT

__all__ = ["Cleanup", "Create", "Intent", "IntentCarrier", "Remove", "intent_group"]

log = logging.getLogger("caldera.k8s")


@dataclass(frozen=True, slots=True)
class Create:
    """Create one object of a start (Service, PodGroup, Pod), in creation order."""

    job: KubeJob
    body: Object
    task: KubeTask | None = None  # the task a pod runs


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove a task's pod: evict it (a decision of the cycle) or delete it (its gang
    stopped) with the grace period, after the guard read the live pod."""

    job: KubeJob | None  # None: a pod no job claims (clean-up)
    namespace: str
    pod: str
    grace: int
    purpose: Purpose
    task: KubeTask | None = None


@dataclass(frozen=True, slots=True)
class Cleanup:
    """Delete what an attempt or a finished job left: its PodGroup, Service, ended pods."""

    namespace: str
    kind: str  # "podgroup" | "service" | "pod"
    name: str


Intent = Create | Remove | Cleanup


def intent_group(intent: Intent) -> Hashable:
    """Intents of one group are carried out in their order; groups go at once."""
    if isinstance(intent, Create):
        return ("job", intent.job.id)
    if isinstance(intent, Remove):
        if intent.job is not None:
            return ("job", intent.job.id)
        return ("pod", intent.namespace, intent.pod)
    return (intent.kind, intent.namespace, intent.name)


class IntentCarrier:
    """What each intent does on the API server; the actuator's state it reads and changes
    is declared here and held by `KubeActuator`."""

    api: ClusterAPI
    jobs: Mapping[str, KubeJob]
    settle: Callable[[KubeJob], None]
    clock: Callable[[], float]
    refused: Callable[[KubeJob, str, str], None]
    queue_not_open: Callable[[str, str], None]
    note: Callable[[Reason, KubeJob, float, str], None]
    pending: list[Intent]
    expected: dict[tuple[str, str], float]
    refused_deletes: int
    api_errors: int
    _lock: threading.Lock
    _inflight: list[deque[tuple[int, Intent]]]

    def _carry_out(self, intent: Intent) -> None:
        if isinstance(intent, Create):
            self._create(intent)
        elif isinstance(intent, Remove):
            self._remove(intent)
        else:
            self._cleanup(intent)

    def _create(self, intent: Create) -> None:
        job, body = intent.job, intent.body
        kind, name = body["kind"], body["metadata"]["name"]
        with self._lock:
            if job.id not in self.jobs or (intent.task is not None and intent.task.done):
                return  # the job ended (or was deleted) before its objects were made
        create = {
            "Pod": self.api.create_pod,
            "PodGroup": self.api.create_pod_group,
            "Service": self.api.create_service,
        }[kind]
        try:
            create(job.namespace, body)
        except ClusterUnavailable:
            raise
        except (ClusterError, NotFound) as error:
            with self._lock:
                self._create_failed(intent, error)
            return
        except Exception as error:  # the client could not send it: this job fails, not all
            log.exception("cannot send %s %s", kind, name)
            with self._lock:
                self._create_failed(intent, Invalid(f"cannot be sent: {type(error).__name__}"))
            return
        if intent.task is not None:
            with self._lock:
                self.expected[(job.namespace, name)] = self.clock()

    def _create_failed(self, intent: Create, error: ClusterError | NotFound) -> None:
        job, body = intent.job, intent.body
        kind, name = body["kind"], body["metadata"]["name"]
        if isinstance(error, ClusterConflict):
            self._check_ours(intent)  # issue 9, defect 10: a 409 is not proof it is ours
        elif isinstance(error, NotFound):
            # Issue 9, defect 10: the namespace went away meanwhile (404, or 403 while it is
            # being terminated), and the job with it: the next look forgets the job. The task
            # never began. A PodGroup's 404 says nothing about its Volcano queue.
            if intent.task is not None:
                intent.task.done, intent.task.exit_code = True, None
                self.settle(job)
        elif kind == "PodGroup":
            # Issue 10, defect 5: the pods of a start whose gang Volcano refused would
            # never be scheduled (Volcano ignores pods without their PodGroup).
            self._pod_group_refused(job, name, error)
        elif isinstance(error, QuotaExceeded):
            # Issue 9, defect 3: the namespace is full for now, not forever. The task never
            # began and it is not the job's fault: its gang is requeued, no retry is spent.
            log.warning("cannot create %s %s now: %s", kind, name, error)
            if intent.task is not None:
                intent.task.done, intent.task.exit_code = True, None
                self.note(Reason.CREATE_REFUSED, job, self.clock(), f"not now: {error}")
                self.settle(job)
        else:
            self.api_errors += 1
            log.error("cannot create %s %s: %s", kind, name, error)
            if intent.task is not None:
                # Refused for good (admission, RBAC, invalid): the task ended before it began.
                intent.task.done, intent.task.exit_code = True, 1
                job.reason = str(error)
                self.note(Reason.CREATE_REFUSED, job, self.clock(), str(error))
                self.settle(job)

    def _drop_creates(self, job: KubeJob) -> list[KubeTask]:
        """Take the job's creates not sent yet out of line — queued, or further on in the
        group being carried out — and return the tasks they would have started. Called with
        the lock held."""

        def mine(intent: Intent) -> bool:
            return isinstance(intent, Create) and intent.job is job

        tasks = [i.task for i in self.pending if isinstance(i, Create) and mine(i) and i.task]
        self.pending = [i for i in self.pending if not mine(i)]
        for group in self._inflight:
            tasks += [i.task for _, i in group if isinstance(i, Create) and mine(i) and i.task]
            kept = [item for item in group if not mine(item[1])]
            group.clear()
            group.extend(kept)
        return tasks

    def _pod_group_refused(self, job: KubeJob, name: str, error: ClusterError | NotFound) -> None:
        """The start's PodGroup was refused: create none of its pods. When its Volcano queue
        is missing or not Open (Volcano's PodGroup webhook, >= 1.12) the start is not the
        job's fault: no retry is spent, the job waits (`queue_not_open`) and is planned again
        once the queue is Open. Any other refusal fails the start as a refused pod does."""
        queue = job.spec.queue
        state = self._volcano_queue_state(queue)
        waits = state != "Open" or isinstance(error, QuotaExceeded)
        starting = self._drop_creates(job)
        if waits:
            what = "missing" if state is None else (state or "not Open yet")
            message = (
                f"PodGroup {name} refused ({error}); Volcano queue {queue} is {what}: "
                "no pod created, the job waits for the queue to be Open"
            )
            log.warning("%s: %s", job.id, message)
            self.queue_not_open(queue, message)
        else:
            message = f"PodGroup {name} refused: {error}"
            self.api_errors += 1
            log.error("%s: %s", job.id, message)
            job.reason = message
        for task in starting:
            task.done, task.exit_code = True, (None if waits else 1)
        self.note(Reason.POD_GROUP_REFUSED, job, self.clock(), message)
        if starting:
            self.settle(job)

    def _volcano_queue_state(self, queue: str) -> str | None:
        """The Volcano Queue's `status.state` ("" before Volcano's controller set it), None
        when there is no such Queue (or it cannot be read: treated as not Open)."""
        try:
            found = self.api.read_queue(queue)
        except ClusterUnavailable:
            raise
        except (ClusterError, NotFound) as error:
            log.warning("cannot read Volcano queue %s: %s", queue, error)
            return None
        if found is None:
            return None
        return str((found.get("status") or {}).get("state") or "")

    def _check_ours(self, intent: Create) -> None:
        """An object with the name exists: carry on only if it is the one this start made
        (owned by the job, of this attempt); otherwise the task cannot run under its name."""
        if intent.task is None:
            return  # a PodGroup or Service of an earlier try of the same start
        job = intent.job
        pod = self.api.read_pod(job.namespace, intent.task.pod)
        metadata = (pod or {}).get("metadata") or {}
        owners = {ref.get("uid") for ref in metadata.get("ownerReferences") or []}
        attempt = (metadata.get("labels") or {}).get(ATTEMPT)
        if pod is not None and job.uid in owners and attempt == str(intent.task.attempt):
            return  # ours: a flush retried after its answer was lost
        message = f"pod {intent.task.pod} already exists and is not this job's"
        log.error("%s: %s", job.id, message)
        intent.task.done, intent.task.exit_code = True, None
        self.note(Reason.CREATE_REFUSED, job, self.clock(), message)
        self.settle(job)

    def _remove(self, intent: Remove) -> None:
        pod = self.api.read_pod(intent.namespace, intent.pod)
        if pod is None:
            return  # gone
        if "deletionTimestamp" in pod["metadata"] and intent.purpose is not Purpose.FORCE:
            return  # already going: its own grace period runs
        with self._lock:
            refused = refusal(pod, intent.purpose, intent.job)
            if refused is not None:
                self.refused_deletes += 1
                log.error("refused to remove pod (%s): %s", intent.purpose.value, refused)
                return
        uid = pod["metadata"].get("uid")
        try:
            if intent.purpose is Purpose.EVICT:
                self.api.evict_pod(intent.namespace, intent.pod, intent.grace, uid)
            else:
                self.api.delete_pod(intent.namespace, intent.pod, intent.grace, uid)
        except NotFound:
            pass  # gone meanwhile
        except ClusterConflict:
            pass  # a newer pod took the name: not the one meant
        except EvictionBlocked as error:
            log.warning("%s", error)
            if intent.job is not None:
                with self._lock:
                    self.refused(intent.job, intent.pod, str(error))
        except ClusterUnavailable:
            raise
        except ClusterError as error:
            with self._lock:
                self.api_errors += 1
            log.error("cannot remove pod %s/%s: %s", intent.namespace, intent.pod, error)
        else:
            task = self._task_of(intent)
            if task is not None:
                with self._lock:
                    task.deleting = True  # asked and accepted: it goes

    @staticmethod
    def _task_of(intent: Remove) -> KubeTask | None:
        if intent.task is not None or intent.job is None:
            return intent.task
        return next((t for t in intent.job.tasks if t.pod == intent.pod), None)

    def forget_evictions(self, job: KubeJob, pods: set[str]) -> None:
        """Drop the evictions of `pods` not sent yet (an eviction rolled back); called with
        the lock held when it happens during a flush."""

        def meant(intent: Intent) -> bool:
            return (
                isinstance(intent, Remove)
                and intent.purpose is Purpose.EVICT
                and intent.namespace == job.namespace
                and intent.pod in pods
            )

        self.pending = [i for i in self.pending if not meant(i)]
        for group in self._inflight:
            kept = [item for item in group if not meant(item[1])]
            group.clear()
            group.extend(kept)

    def _cleanup(self, intent: Cleanup) -> None:
        delete: Callable[[str, str], bool] = {
            "podgroup": self.api.delete_pod_group,
            "service": self.api.delete_service,
            "pod": lambda namespace, name: self.api.delete_pod(namespace, name, 0),
        }[intent.kind]
        try:
            delete(intent.namespace, intent.name)
        except NotFound:
            pass
        except ClusterUnavailable:
            raise
        except ClusterError as error:
            with self._lock:
                self.api_errors += 1
            log.warning("clean-up of %s/%s failed: %s", intent.namespace, intent.name, error)
