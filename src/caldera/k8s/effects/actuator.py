"""The controller's effects (`caldera.runtime.Effects`): what the kernel's decisions do to the
cluster, kept as data until the TrainingJobs' status says why.

The kernel changes jobs in memory and calls these effects; they only record: statuses to
write, Events, the queues' waiting modes, and typed intents (`Create`, `Remove`, `Cleanup`).
`flush` writes the statuses first (so a crash never leaves a pod nobody's status explains),
then carries the intents out, then sends the Events. A reader can print what is about to
happen (`pending`).

Writes per start (issue 40): a status identical to the one this controller last wrote is not
sent again; a start behind a scheduler that reads no PodGroup (`NO_POD_GROUPS`:
kube-scheduler) creates none; a job's first start has no Event, its conditions say it
(`caldera.k8s.reporting.events.merge_per_job`). A single-pod start is then its status and its
pod, and the status once more when the pod runs (the Running condition): three writes.

How the writes go out — in rounds, several at once, the admissions on their own path — is
`caldera.k8s.effects.flush.Flusher`, the actuator's base.

Every pod removal reads the live pod first and passes the guard (`caldera.k8s.effects.guard`):
evictions go through the Eviction API (PodDisruptionBudgets, the DisruptionTarget
condition), stops and clean-ups are plain deletes with the grace period.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from caldera.core import Evict, Nomination, PolicyConfig, Room, TaskPlacement, Throttle
from caldera.k8s import names
from caldera.k8s.cluster.api import (
    ClusterAPI,
    Object,
)
from caldera.k8s.effects.carry_out import Cleanup, Create, Intent, Remove
from caldera.k8s.effects.flush import Flusher, open_gate
from caldera.k8s.effects.guard import Purpose
from caldera.k8s.effects.render import Owner, RenderError, render_start
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.reporting.events import JobEvent, Reason, narrate
from caldera.k8s.reporting.status import rejected_status
from caldera.k8s.settings import NO_POD_GROUPS, KubeSettings, uses_pod_groups
from caldera.model import GPU_MILLI, Node
from caldera.runtime import EventKind
from caldera.runtime.wire import ByName, nomination_to_wire

__all__ = [
    "NO_POD_GROUPS",
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
# server's queue fed, few enough for its connection pool (`caldera.k8s.cluster.client.POOL`).
WRITERS = 8


@dataclass
class KubeActuator(Flusher):
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
    # During a long flush: the runtime admits the TrainingJobs that came meanwhile and
    # returns the jobs it admitted (`KubeRuntime.admit_new`).
    between: Callable[[], Sequence[KubeJob]] = field(default=lambda: ())
    # Whether this controller may write now (leader election: the Lease is still held). A
    # flush under way finishes what it began; admitting newcomers meanwhile waits for it.
    leading: Callable[[], bool] = field(default=lambda: True)
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
    # The cycle left starts for later (`caldera.k8s.pacing`): a flush ends once its pods are
    # out, the admissions' statuses left written behind it (`Flusher._write_behind`).
    paced: bool = False
    _starts: dict[str, list[Object]] = field(default_factory=dict)
    _sequence: int = 0
    _pool: ThreadPoolExecutor | None = None
    # The admission path's own writers: a newcomer's status never queues behind the backlog.
    _intake_pool: ThreadPoolExecutor | None = None
    # When this flush last admitted (time.monotonic); None: not in a flush, or admitting now.
    _admitted_at: float | None = None
    # The jobs whose statuses the flush's round is writing now (the admission path leaves them).
    _round: set[str] = field(default_factory=set)
    # Cleared while the admission path writes: the flush's writers start no new request
    # meanwhile, so the API server answers the admissions first.
    _intake_idle: threading.Event = field(default_factory=open_gate)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _keys: ByName | None = None
    _inflight: list[deque[tuple[int, Intent]]] = field(default_factory=list)
    # The status last written for each live job (by uid), as sorted JSON, the attempt it was
    # written at and the state it said: an unchanged one is not written again, and a start
    # whose last status says nothing of it may follow its pods, the longer when it said
    # Pending (`Flusher._defer_starts`). Jobs no longer live are dropped from it at each
    # flush's end.
    _written: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    # Starts whose status is written after their pods, at a later flush (`Flusher`).
    _after_pods: dict[str, KubeJob] = field(default_factory=dict)
    # First statuses a paced flush left writing on the intake's writers (`Flusher`): job id
    # → the job and whether the server took it.
    _behind: dict[str, tuple[KubeJob, Future[bool]]] = field(default_factory=dict)
    # Admitted Events waiting for the job's next Event, up to `ADMITTED_WAITS` (`Flusher`),
    # and those of the last flush, sent with the next flush's Events (merged with a Started
    # one when the job starts).
    _held: list[JobEvent] = field(default_factory=list)
    _carried: list[JobEvent] = field(default_factory=list)
    # Pods created and not yet seen by the reads (an informer lags the API by a moment):
    # (namespace, pod) → when. Until seen (or `EXPECT` seconds pass) a missing pod is not gone.
    expected: dict[tuple[str, str], float] = field(default_factory=dict)
    # TrainingJobs this controller ended or refused (uid): a lagging cache still shows them
    # as they were; they are never taken back nor admitted twice.
    settled: set[str] = field(default_factory=set)

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
            self.events.append(
                JobEvent(
                    job.namespace, job.name, job.uid, said.reason, said.message, now, said.quiet
                )
            )
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
