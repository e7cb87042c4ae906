"""The controller's effects (`caldera.runtime.Effects`): what the kernel's decisions do to the
cluster, kept as data until the TrainingJobs' status says why.

The kernel changes jobs in memory and calls these effects; they only record: statuses to
write, Events, the queues' waiting modes, and typed intents (`Create`, `Remove`, `Cleanup`).
`flush` writes the statuses first (so a crash never leaves a pod nobody's status explains),
then carries the intents out, then sends the Events. A reader can print what is about to
happen (`pending`).

Writes per start (issue 40): a status identical to the one this controller last wrote is not
sent again; a start behind a scheduler that reads no PodGroup (`NO_POD_GROUPS`:
kube-scheduler) creates none; a job admitted and started in one step gets one Event
(`caldera.k8s.events.merge_per_job`). A single-pod start is then its status, its pod and one
Event, and the status once more when the pod runs (the Running condition).

With `writers` > 1 (what `caldera k8s run` uses) each phase sends up to that many requests
at once: the statuses of different jobs, the intents of different jobs (one job's intents in
their order: Service, PodGroup, then its pods), the Events. The order between the phases
stays; what a request's answer changes (a refused create stops its gang, a pod caldera
created is expected) is done by one thread at a time, in the order the intents were queued.
On a real API server each request waits mostly for the server, so a burst of starts no
longer moves at one round trip at a time (issue 10, item 4).

Every pod removal reads the live pod first and passes the guard (`caldera.k8s.guard`):
evictions go through the Eviction API (PodDisruptionBudgets, the DisruptionTarget
condition), stops and clean-ups are plain deletes with the grace period.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from caldera.core import Evict, Nomination, PolicyConfig, Room, TaskPlacement, Throttle
from caldera.errors import NotFound
from caldera.k8s import names
from caldera.k8s.api import (
    ClusterAPI,
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    EvictionBlocked,
    Invalid,
    Object,
    QuotaExceeded,
)
from caldera.k8s.events import JobEvent, Reason, event_body, merge_per_job, narrate
from caldera.k8s.guard import Purpose, refusal
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.render import Owner, RenderError, render_start
from caldera.k8s.settings import NO_POD_GROUPS, KubeSettings, uses_pod_groups
from caldera.k8s.statemap import write_throttles
from caldera.k8s.status import rejected_status, status_body
from caldera.model import GPU_MILLI, Node
from caldera.runtime import EventKind
from caldera.runtime.wire import ByName, nomination_to_wire
from caldera.trainingjob_api import ATTEMPT

__all__ = [
    "NO_POD_GROUPS",
    "ROUND",
    "WRITERS",
    "Cleanup",
    "Create",
    "Intent",
    "KubeActuator",
    "Remove",
    "uses_pod_groups",
]

log = logging.getLogger("caldera.k8s")

# Requests a running controller sends at once (`caldera k8s run`): enough to keep a busy API
# server's queue fed, few enough for its connection pool (`caldera.k8s.client.POOL`).
WRITERS = 8
# Jobs' statuses written per round of a flush (see `flush`): a round of starts is about three
# times as many requests, a few seconds on a busy API server.
ROUND = 100


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

_T = TypeVar("_T")


def _group(intent: Intent) -> Hashable:
    """Intents of one group are carried out in their order; groups go at once."""
    if isinstance(intent, Create):
        return ("job", intent.job.id)
    if isinstance(intent, Remove):
        if intent.job is not None:
            return ("job", intent.job.id)
        return ("pod", intent.namespace, intent.pod)
    return (intent.kind, intent.namespace, intent.name)


@dataclass
class KubeActuator:
    """Effects for the controller's kernel, and the one place that writes to the cluster."""

    api: ClusterAPI
    settings: KubeSettings
    policy: PolicyConfig
    room: Room
    nodes: tuple[Node, ...]
    jobs: Mapping[str, KubeJob]  # the kernel's live jobs (to name a preemptor)
    throttles: dict[str, Throttle]
    settle: Callable[[KubeJob], None]  # a task ended while acting: the kernel moves it on
    clock: Callable[[], float]
    # The Eviction API refused a victim's pod (job, pod, the server's words): the runtime
    # rolls the eviction back and re-plans its preemptor.
    refused: Callable[[KubeJob, str, str], None] = field(default=lambda job, pod, why: None)
    # Volcano refused a start's PodGroup because its queue is missing or not Open (queue,
    # the server's words): the runtime keeps that queue's jobs waiting until it is Open.
    queue_not_open: Callable[[str, str], None] = field(default=lambda queue, why: None)
    # Between two rounds of a long flush: the runtime admits the TrainingJobs that came
    # meanwhile (`KubeRuntime.admit_new`).
    between: Callable[[], None] = field(default=lambda: None)
    instance: str = field(default_factory=socket.gethostname)
    dirty: dict[str, KubeJob] = field(default_factory=dict)
    rejections: list[tuple[str, str, Object]] = field(default_factory=list)
    pending: list[Intent] = field(default_factory=list)
    events: list[JobEvent] = field(default_factory=list)
    throttles_dirty: bool = False
    refused_deletes: int = 0
    api_errors: int = 0
    # Requests sent at once by `flush` (1: one after another, in order).
    writers: int = 1
    _starts: dict[str, list[Object]] = field(default_factory=dict)
    _sequence: int = 0
    _pool: ThreadPoolExecutor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _keys: ByName | None = None
    _inflight: list[deque[tuple[int, Intent]]] = field(default_factory=list)
    # The status last written for each live job (by uid), as sorted JSON: an unchanged one is
    # not written again. Jobs no longer live are dropped from it at each flush's end.
    _written: dict[str, str] = field(default_factory=dict)
    # Admitted Events of jobs admitted between two rounds of this flush, and those of the last
    # flush, sent with the next flush's Events (merged with a Started one when the job starts).
    _held: list[JobEvent] = field(default_factory=list)
    _carried: list[JobEvent] = field(default_factory=list)
    # Pods created and not yet seen by the reads (an informer lags the API by a moment):
    # (namespace, pod) → when. Until seen (or `EXPECT` seconds pass) a missing pod is not gone.
    expected: dict[tuple[str, str], float] = field(default_factory=dict)
    # TrainingJobs this controller ended or refused (uid): a lagging cache still shows them
    # as they were; they are never taken back nor admitted twice.
    settled: set[str] = field(default_factory=set)

    @property
    def keys(self) -> ByName:
        # Built once per node list: a burst writes thousands of statuses.
        if self._keys is None or self._keys.nodes is not self.nodes:
            self._keys = ByName(self.nodes)
        return self._keys

    @property
    def grace(self) -> int:
        return max(int(-(-self.policy.grace_period // 1)), 0)

    # -- Effects ---------------------------------------------------------------------------

    def make_tasks(
        self,
        job: KubeJob,
        placement: tuple[TaskPlacement, ...],
        attempt: int,
        first_rank: int,
        started_under: Nomination | None,
    ) -> list[KubeTask] | None:
        grow = first_rank > 0
        master = min((t.rank for t in job.running), default=first_rank)
        nomination = started_under
        try:
            objects = render_start(
                job.spec,
                job.workload,
                placement,
                self.nodes,
                attempt,
                self.policy.grace_period,
                self.settings,
                first_rank=first_rank,
                master_rank=master,
                owner=Owner(job.name, job.uid),
                started_under=nomination,
                grow=grow,
            )
        except Exception as error:  # RenderError, or any other: it fails this job alone
            # A node without what the job needs (a GPU share where the memory is unknown):
            # the cycle would choose it again; the job cannot run as written.
            log.error(
                "cannot start %s: %s", job.id, error, exc_info=not isinstance(error, RenderError)
            )
            job.reason = f"cannot be started: {error}"
            self.record(EventKind.REJECT, job, 0.0, reason=job.reason)
            return None
        if not self.room.take_all(placement):
            # The core never asks for this; if it ever does, nobody gets a GPU twice.
            log.error("refused start of %s: room on its nodes is taken", job.id)
            return None
        if not grow:
            job.started_under = nomination_to_wire(nomination, self.keys)
        if not uses_pod_groups(self.settings):
            objects = [o for o in objects if o["kind"] != "PodGroup"]
        self._starts[job.id] = objects
        return [
            KubeTask(
                rank=first_rank + i,
                attempt=attempt,
                placement=p,
                pod=names.pod_name(job.name, attempt, first_rank + i),
                counted=True,
            )
            for i, p in enumerate(placement)
        ]

    def give(self, job: KubeJob, tasks: Sequence[KubeTask]) -> None:
        for task in tasks:
            if task.counted:
                self.room.give(task.placement)
                task.counted = False
            if task.finished:  # an ended pod: nothing more to learn from it
                task.finished = False
                self.pending.append(Cleanup(job.namespace, "pod", task.pod))

    def launch(self, job: KubeJob, tasks: Sequence[KubeTask], grow: bool, now: float) -> None:
        by_pod = {t.pod: t for t in tasks}
        for task in tasks:
            task.created_at = now
        for body in self._starts.pop(job.id, []):
            made = by_pod.get(body["metadata"]["name"]) if body["kind"] == "Pod" else None
            self.pending.append(Create(job, body, made))
        where: dict[str, float] = {}
        for task in tasks:
            node = self.nodes[task.placement.node].name
            where[node] = where.get(node, 0.0) + task.placement.gpu / GPU_MILLI
        log.info("start %s attempt %d on %s", job.id, job.attempts, where)
        self.record(EventKind.START, job, now, placement=where, grow=grow)

    def signal(
        self,
        job: KubeJob,
        tasks: Sequence[KubeTask],
        evict: Evict,
        now: float,
        detail: Mapping[str, Any],
    ) -> None:
        for task in tasks:
            self.pending.append(
                Remove(job, job.namespace, task.pod, self.grace, Purpose.EVICT, task)
            )
        log.info(
            "evict %s tasks %s (%s for %s), grace %d s",
            job.id,
            [t.rank for t in tasks],
            evict.reason.value,
            evict.preemptor,
            self.grace,
        )
        self.record(
            EventKind.EVICT,
            job,
            now,
            reason=evict.reason.value,
            preemptor=evict.preemptor,
            tasks=[t.rank for t in tasks],
            grace=self.policy.grace_period,
            whole=not job.running,
        )

    def stop(self, job: KubeJob, tasks: Sequence[KubeTask], now: float) -> None:
        for task in tasks:
            self.pending.append(
                Remove(job, job.namespace, task.pod, self.grace, Purpose.STOP, task)
            )

    def progressing(self, job: KubeJob, gpu: int, now: float) -> None:
        pass  # the controller counts nothing here: Prometheus reads the pods

    def persist(self, job: KubeJob) -> None:
        self.dirty[job.id] = job

    def record(
        self, kind: EventKind | Reason, job: KubeJob | None, now: float, **data: Any
    ) -> None:
        if kind is EventKind.THROTTLE_ON or kind is EventKind.THROTTLE_OFF:
            self.throttles_dirty = True
            log.info("queue %s: %s", data.get("queue"), kind.value)
            if job is None:
                return
        if job is None:
            return
        said = narrate(kind, job, now, data)
        if kind is EventKind.REQUEUE:
            self._cleanup_attempt(job)
        if said is not None:
            reason, message = said
            self.events.append(JobEvent(job.namespace, job.name, job.uid, reason, message, now))
        self.dirty[job.id] = job

    def retired(self, job: KubeJob) -> None:
        """The job ended and holds nothing: its status is final; its attempt's PodGroup,
        Service and finished pods go (issue 9, defect 10: pods were never cleaned up)."""
        self._cleanup_attempt(job)
        if job.spec.tasks > 1:
            self.pending.append(Cleanup(job.namespace, "service", job.name))
        self.dirty[job.id] = job
        self.settled.add(job.uid)

    # -- the controller's own findings ------------------------------------------------------

    def note(self, reason: Reason, job: KubeJob, now: float, message: str) -> None:
        """An Event (and condition) about something the controller saw, not decided."""
        self.record(reason, job, now, message=message)

    def reject(self, obj: Object, reason: str, now: float) -> None:
        """A TrainingJob refused before it became a job: its status says why, and an Event."""
        metadata = obj["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        self.settled.add(metadata["uid"])
        self.rejections.append((namespace, name, rejected_status(reason, now, obj)))
        self.events.append(JobEvent(namespace, name, metadata["uid"], Reason.REJECTED, reason, now))

    def remove(
        self, job: KubeJob | None, namespace: str, pod: str, grace: int, purpose: Purpose
    ) -> None:
        self.pending.append(Remove(job, namespace, pod, grace, purpose))

    def _cleanup_attempt(self, job: KubeJob) -> None:
        if job.attempts and uses_pod_groups(self.settings):
            group = names.pod_group_name(job.name, job.attempts)
            self.pending.append(Cleanup(job.namespace, "podgroup", group))

    # -- carrying it out -------------------------------------------------------------------

    def flush(self) -> None:
        """Write the statuses and waiting modes, then act, then tell. On an unreachable API
        server what is left stays queued for the next flush, in its order.

        In rounds of at most `ROUND` jobs' statuses: a job's objects go once its status is
        written, the rest wait for their round (so a burst of thousands of starts has pods
        bound while the later statuses are still being written, not after all of them);
        between two rounds of the backlog the flush began with, the Events said so far go
        and `between` admits the TrainingJobs that came meanwhile (their status is written
        in the next round, not after the whole burst: issue 40)."""
        rounds = -(-len(self.dirty) // ROUND) - 1  # `between` calls: the backlog's rounds
        while self.dirty or self.throttles_dirty or self.pending or self.rejections:
            self._write_statuses(ROUND)
            if self.throttles_dirty:
                self._write_throttles()
                self.throttles_dirty = False
            if self.pending:
                self._carry_out_pending()
            if rounds > 0 and self.dirty:
                rounds -= 1
                self._send_events()
                said = len(self.events)
                self.between()
                # Admitted between rounds, started at the next step: its Admitted Event waits
                # for that step, to go as one with its Started Event (`merge_per_job`).
                fresh = self.events[said:]
                self._held += [e for e in fresh if e.reason is Reason.ADMITTED]
                self.events[said:] = [e for e in fresh if e.reason is not Reason.ADMITTED]
        self._send_events()
        self._carried, self._held = self._held, []  # to the next flush (one step at most)
        if len(self._written) > len(self.jobs):
            live = {job.uid for job in self.jobs.values()}
            self._written = {uid: said for uid, said in self._written.items() if uid in live}

    def _each(self, send: Callable[[_T], object], items: Sequence[_T]) -> list[Exception | None]:
        """`send` each item, up to `writers` at once; what each raised (None: done). One at a
        time, an unreachable server stops the rest (they count as not sent)."""
        if self.writers <= 1 or len(items) <= 1:
            raised: list[Exception | None] = []
            for item in items:
                if raised and isinstance(raised[-1], ClusterUnavailable):
                    raised.append(raised[-1])
                    continue
                try:
                    send(item)
                    raised.append(None)
                except Exception as error:
                    raised.append(error)
            return raised
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.writers, thread_name_prefix="caldera-writer")
        futures = [self._pool.submit(send, item) for item in items]
        done: list[Exception | None] = []
        for future in futures:  # every one has ended before the caller goes on
            failure = future.exception()
            if failure is not None and not isinstance(failure, Exception):
                raise failure
            done.append(failure)
        return done

    @staticmethod
    def _raise_failure(raised: Sequence[Exception | None]) -> None:
        """Re-raise what `_each` caught: any exception but an unreachable server first (a
        bug), else the first unreachable-server failure; nothing when every item was sent."""
        for error in raised:
            if error is not None and not isinstance(error, ClusterUnavailable):
                raise error
        unavailable = next((e for e in raised if isinstance(e, ClusterUnavailable)), None)
        if unavailable is not None:
            raise unavailable

    def _write_statuses(self, most: int) -> None:
        """The rejections, then the statuses of the first `most` changed jobs (oldest
        change first)."""
        rejections = list(self.rejections)
        raised = self._each(lambda r: self._patch_status(f"{r[0]}/{r[1]}", *r), rejections)
        self.rejections = [r for r, e in zip(rejections, raised, strict=True) if e is not None]
        self._raise_failure(raised)
        dirty = list(itertools.islice(self.dirty.values(), most))
        raised = self._each(self._write_status, dirty)
        for job, error in zip(dirty, raised, strict=True):
            if error is None and self.dirty.get(job.id) is job:
                del self.dirty[job.id]
        self._raise_failure(raised)

    def _write_status(self, job: KubeJob) -> None:
        """Patch the job's status unless it is what this controller last wrote: a job marked
        changed for the snapshot only (a pod seen bound) needs no write (issue 40: a third
        status patch per start)."""
        body = status_body(job, self.keys)
        said = json.dumps(body, sort_keys=True, default=str)
        if self._written.get(job.uid) == said:
            return
        if self._patch_status(job.id, job.namespace, job.name, body):
            with self._lock:
                self._written[job.uid] = said

    def _patch_status(self, job_id: str, namespace: str, name: str, body: Object) -> bool:
        """Whether the status was written."""
        try:
            self.api.patch_job_status(namespace, name, body)
            return True
        except NotFound:
            return False  # deleted meanwhile: the next look forgets it
        except ClusterUnavailable:
            raise
        except ClusterError as error:
            with self._lock:
                self.api_errors += 1
            log.warning("cannot update the status of %s: %s", job_id, error)
            return False

    def _write_throttles(self) -> None:
        write_throttles(self.api, self.settings.state_namespace, self.throttles)

    def _carry_out_pending(self) -> None:
        """Carry out what is queued now: one group after another per job, groups at once.
        What their answers queue (a gang stopped) waits for the next round, after the
        statuses they changed. Not sent on an unreachable server: back first in line. The
        intents of a job whose status is still to be written wait for its round."""
        batch = [(i, intent) for i, intent in enumerate(self.pending) if not self._waits(intent)]
        self.pending = [intent for intent in self.pending if self._waits(intent)]
        groups: dict[Hashable, deque[tuple[int, Intent]]] = {}
        for item in batch:
            key = _group(item[1]) if self.writers > 1 else None
            groups.setdefault(key, deque()).append(item)
        self._inflight = list(groups.values())
        try:
            raised = self._each(self._carry_out_group, self._inflight)
            unsent = sorted(item for group in self._inflight for item in group)
        finally:
            self._inflight = []
        if unsent:
            self.pending[:0] = [intent for _, intent in unsent]
        self._raise_failure(raised)

    def _waits(self, intent: Intent) -> bool:
        """Whether the intent's job has a status still to be written this flush."""
        job = intent.job if isinstance(intent, Create | Remove) else None
        return job is not None and job.id in self.dirty

    def _carry_out_group(self, group: deque[tuple[int, Intent]]) -> None:
        while True:
            with self._lock:
                if not group:
                    return
                item = group.popleft()
            try:
                self._carry_out(item[1])
            except ClusterUnavailable:
                with self._lock:
                    group.appendleft(item)  # it stays first in line, the rest behind it
                raise

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

    def _send_events(self) -> None:
        events = merge_per_job([*self._carried, *self.events])
        self.events, self._carried = [], []
        numbered = []
        for event in events:
            self._sequence += 1
            numbered.append((event, self._sequence))
        self._raise_failure(self._each(self._send_event, numbered))  # only a bug can be

    def _send_event(self, numbered: tuple[JobEvent, int]) -> None:
        event, sequence = numbered
        try:
            body = event_body(event, self.instance, sequence)
            self.api.create_event(event.namespace, body)
        except (ClusterError, NotFound) as error:  # best effort: the status is the record
            log.debug(
                "event %s on %s/%s dropped: %s", event.reason, event.namespace, event.name, error
            )
