"""How the controller's writes go out (`Flusher.flush`, the base of
`caldera.k8s.effects.actuator.KubeActuator`): statuses, then intents, then Events, in
rounds, several at once, with the admissions on their own path.

With `writers` > 1 (what `caldera k8s run` uses) each phase sends up to that many requests
at once: the statuses of different jobs, the intents of different jobs (one job's intents in
their order: Service, PodGroup, then its pods), the Events. The order between the phases
stays; what a request's answer changes (a refused create stops its gang, a pod caldera
created is expected) is done by one thread at a time, in the order the intents were queued.
On a real API server each request waits mostly for the server, so a burst of starts no
longer moves at one round trip at a time (issue 10, item 4).

Intake on its own path (issue 40): while a flush waits on its writers, a TrainingJob that
came meanwhile is admitted and its status written within about `ADMIT_EVERY` seconds, not
after the burst of starts (`Flusher._admit_meanwhile`). When the cycle was paced
(`caldera.k8s.pacing`: starts left for later so the binder's queue stays short) the flush
is short instead: the pods that wait for no status go first, then the round whose statuses
the other starts wait for (theirs first), then their pods; the admissions' first statuses
left are written on the intake's writers while the next step reads and decides
(`Flusher._write_behind`), so the binder is fed again within a step, not after every
admission of a burst.

A start's status after its pods (issue 40, three writes per start): a job whose status this
controller already wrote (admitted Pending, or requeued) and that starts now has its pods
created at once and its status written once they run — one status write for the start and
the run, not two — or, if they do not, saying Starting after `SAY_STARTING_AFTER_PENDING`
seconds when its last status said Pending, after `SAY_STARTING_AFTER` when it said more.
A job's first status still goes before its objects: it carries the submit time and queue a
restarted controller needs. Should the controller stop between the pods and the status, its
successor finds the job Pending beside pods of an attempt its status does not name: orphans,
deleted, their room held until they are gone (`caldera.k8s.observe.pods`), and the job
started again as a later attempt under other names (`caldera.k8s.observe.intake`) — nothing
is double-booked.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from caldera.core import Throttle
from caldera.errors import NotFound
from caldera.k8s.cluster.api import ClusterError, ClusterUnavailable, Object
from caldera.k8s.effects.carry_out import Create, Intent, IntentCarrier, Remove, intent_group
from caldera.k8s.ha.statemap import write_throttles
from caldera.k8s.jobs import KubeJob
from caldera.k8s.reporting.events import JobEvent, Reason, event_body, merge_per_job
from caldera.k8s.reporting.status import status_body
from caldera.k8s.settings import KubeSettings
from caldera.model import JobState, Node
from caldera.runtime.wire import ByName

__all__ = [
    "ADMITTED_WAITS",
    "ADMIT_EVERY",
    "BACKLOG_AT_ONCE",
    "ROUND",
    "SAY_STARTING_AFTER",
    "SAY_STARTING_AFTER_PENDING",
    "Flusher",
    "open_gate",
]

log = logging.getLogger("caldera.k8s")

# Jobs' statuses written per round of a flush (see `flush`): a round of starts is about three
# times as many requests, a few seconds on a busy API server.
ROUND = 100
# Seconds a flush waits on its writers before it admits the TrainingJobs that came meanwhile
# and writes their status on its own path (`Flusher._admit_meanwhile`), and between two
# such admissions: a TrainingJob sent during a long burst of starts is admitted within about
# this long (issue 40: it waited for the round, 12–37 s). A flush shorter than this admits
# none: the next step admits and starts them in one status write.
ADMIT_EVERY = 1.0
# First statuses of the step's own backlog (jobs admitted at its start, their objects waiting
# for their round) that each admission during a flush writes at least, oldest first, beside
# as many as the newcomers: about what the intake's writers send in a second on a busy API
# server (250–430 measured at 200 nodes). With a round's worth (100), the last of 446 jobs
# read at a step's start during a burst waited 7 s for its first status (issue 40: 5 s at
# p99); their pods wait for those statuses anyway.
BACKLOG_AT_ONCE = 300
# Seconds a started job's status may wait for its pods to run before it is written saying
# Starting (`Flusher._defer_starts`): most pods run within it, and their job's status is then
# written once, saying Running.
SAY_STARTING_AFTER = 10.0
# The same for a job whose last status said Pending (admitted while a flush ran, its start
# decided at a later step): during a burst its pods wait in the binder's queue — at 200
# nodes × 1,600 pods half of them 11 s and more after the start — and with 10 s a third of
# the single-pod starts paid a Starting patch (4 writes, not 3). Its pods are there to see
# meanwhile. A job that said more (Held with its reason, Running an earlier attempt) is told
# after `SAY_STARTING_AFTER`: what it said is no longer so.
SAY_STARTING_AFTER_PENDING = 30.0
# Seconds an admitted job's Admitted Event waits for the job's next Event (its start, quiet
# for a first start, or why it is held) to go as one with it (`merge_per_job`): with starts
# paced, a burst's jobs start as the binder takes them, up to minutes after their admission
# (8,000 pods at kube-scheduler's 50 binds/s: 160 s), and an Event each was a fourth write
# per single-pod job (with 30 s here, 0.74 per job in that burst). A job that says nothing
# more in that time has its Admitted Event sent, with its own time; its conditions say it
# all along.
ADMITTED_WAITS = 300.0


_T = TypeVar("_T")


def _fold_for(said: str) -> float:
    """How long a start's status may wait for its pods after a status that said `said`."""
    return SAY_STARTING_AFTER_PENDING if said == JobState.PENDING.value else SAY_STARTING_AFTER


def _job_of(intent: Intent) -> KubeJob | None:
    """The job an intent acts for (None: a clean-up of a pod no job claims, or not a job's)."""
    return intent.job if isinstance(intent, Create | Remove) else None


def open_gate() -> threading.Event:
    """An Event already set: nothing to wait for yet."""
    gate = threading.Event()
    gate.set()
    return gate


class Flusher(IntentCarrier):
    """Sends what the actuator recorded; the state it reads and changes is declared here and
    held by `KubeActuator`."""

    settings: KubeSettings
    nodes: tuple[Node, ...]
    throttles: dict[str, Throttle]
    between: Callable[[], Sequence[KubeJob]]
    leading: Callable[[], bool]
    instance: str
    dirty: dict[str, KubeJob]
    rejections: list[tuple[str, str, Object]]
    events: list[JobEvent]
    throttles_dirty: bool
    writers: int
    paced: bool
    settled: set[str]
    _sequence: int
    _pool: ThreadPoolExecutor | None
    _intake_pool: ThreadPoolExecutor | None
    _admitted_at: float | None
    _round: set[str]
    _intake_idle: threading.Event
    _keys: ByName | None
    _written: dict[str, tuple[str, int, str]]  # uid → the status, its attempt, its state
    _after_pods: dict[str, KubeJob]
    _behind: dict[str, tuple[KubeJob, Future[bool]]]
    _held: list[JobEvent]
    _carried: list[JobEvent]

    @property
    def keys(self) -> ByName:
        # Built once per node list: a burst writes thousands of statuses.
        if self._keys is None or self._keys.nodes is not self.nodes:
            self._keys = ByName(self.nodes)
        return self._keys

    # -- carrying it out -------------------------------------------------------------------

    def flush(self) -> None:
        """Write the statuses and waiting modes, then act, then tell. On an unreachable API
        server what is left stays queued for the next flush, in its order.

        In rounds of at most `ROUND` jobs' statuses: a job's objects go once its status is
        written, the rest wait for their round (so a burst of thousands of starts has pods
        bound while the later statuses are still being written, not after all of them).
        Intake has its own path (issue 40): between two rounds of the backlog the flush
        began with, and every `ADMIT_EVERY` seconds while it waits on its writers, the
        TrainingJobs that came meanwhile are admitted and their status written at once, on
        writers of their own, ahead of the backlog (`_admit_meanwhile`). A paced flush
        (`paced`) ends once its pods are out (`_write_behind`)."""
        rounds = -(-len(self.dirty) // ROUND) - 1  # the backlog's rounds
        self._admitted_at = time.monotonic()
        self._settle_behind()
        try:
            if self.paced and self.pending:
                self._carry_out_pending()  # the pods that wait for no status: the binder's
            while self.dirty or self.throttles_dirty or self.pending or self.rejections:
                self._write_statuses(ROUND)
                if self.throttles_dirty:
                    self._write_throttles()
                    self.throttles_dirty = False
                if self.pending:
                    self._carry_out_pending()
                if self.paced and not self.pending:
                    self._write_behind()  # the admissions left: while the next step decides
                    break
                if rounds > 0 and self.dirty:
                    rounds -= 1
                    self._send_events()
                    self._admit_meanwhile()
            self._send_events()
        finally:
            self._admitted_at = None
            # the starts whose status waits for their pods: written at a later flush
            self.dirty = {**self._after_pods, **self.dirty}
            self._after_pods = {}
        self._carried, self._held = self._held, []  # to the next flush (one step at most)
        if len(self._written) > len(self.jobs):
            live = {job.uid for job in self.jobs.values()}
            self._written = {uid: said for uid, said in self._written.items() if uid in live}

    def _admit_meanwhile(self) -> None:
        """Admit the TrainingJobs that came since the flush began (`between`) and write their
        status now — the admission's own, Pending or Held, or Rejected — rather than after
        the backlog of starts. Their starts are the next step's: the cycle decides them, as
        every start. With them go the first statuses of the backlog's jobs this controller
        has not written yet (admitted at the step's start, their start waiting for its
        round), oldest first and ahead of the newcomers, who came after them — as many as
        the newcomers, at least `BACKLOG_AT_ONCE`: the same status written earlier, so
        each job's admission is said within seconds; their objects still wait for it, as
        always, and the rounds' pods are not held up behind thousands of statuses. While
        these go, the flush's writers start no new request (the API server answers the
        admissions first). Nothing when this controller no longer leads: a standby writes
        nothing. A status not written here (the API server failing) stays queued for its
        round."""
        if self._admitted_at is None or self.paced:
            return  # a paced flush is short: the next step admits them (`_write_behind`)
        self._admitted_at = None  # no admission inside this one
        if not self.leading():
            self._admitted_at = time.monotonic()
            return
        try:
            with self._lock:  # the writers' callbacks change jobs too: one at a time
                refused = len(self.rejections)
                try:
                    # Started at a later step: their Admitted Events wait for it
                    # (`ADMITTED_WAITS`, `_send_events`).
                    admitted = list(self.between())
                except Exception as failure:  # the flush goes on; the next step takes them in
                    log.warning("no admission during the flush: %s", failure)
                    admitted = []
                rejections = self.rejections[refused:]
                del self.rejections[refused:]
            self._intake_idle.clear()
            written = self._each(self._write_rejection, rejections, intake=True)
            self.rejections += [
                r for r, e in zip(rejections, written, strict=True) if e is not None
            ]
            with self._lock:
                fresh_jobs = [job for job in admitted if self.dirty.get(job.id) is job]
                new = {job.id for job in fresh_jobs}
                backlog = (
                    job
                    for job in self.dirty.values()
                    if job.uid not in self._written
                    and job.id not in self._round
                    and job.id not in new
                )
                # the backlog's first, as many as the newcomers and at least BACKLOG_AT_ONCE:
                # they came earlier, and a burst of newcomers kept pushing them back (issue
                # 40's 10 s admission tail)
                older = itertools.islice(backlog, max(BACKLOG_AT_ONCE, len(fresh_jobs)))
                jobs = [*older, *fresh_jobs]
            raised = self._each(self._write_status, jobs, intake=True)
            with self._lock:
                for job, error in zip(jobs, raised, strict=True):
                    if error is None and self.dirty.get(job.id) is job:
                        del self.dirty[job.id]
            for error in (*written, *raised):
                if error is not None and not isinstance(error, ClusterUnavailable):
                    log.error("admission status not written: %r", error)
            if jobs or rejections:
                log.info(
                    "during a flush: %d admitted, %d rejected, %d first statuses written",
                    len(new),
                    len(rejections),
                    len(jobs),
                )
        finally:
            self._intake_idle.set()
            self._admitted_at = time.monotonic()

    def _write_behind(self) -> None:
        """The end of a paced flush, its pods sent: the first statuses still to write (the
        admissions), oldest first and at most `BACKLOG_AT_ONCE`, go out on the intake's
        writers while the next step reads, decides and sends its pods — not between this
        step's pods and the next's (a flush that wrote a burst's admissions for 3–6 s left
        the binder idle once it had bound its 64 pods). Each counts as written from now
        (`_written`: the job's start may then follow its pods, `_defer_starts`); what
        depends on one waits for it (`_after_behind`); one that failed is undone at the
        next flush (`_settle_behind`). With one writer (tests, `--once`) they stay queued
        for the next flush."""
        if self.writers <= 1:
            return
        first = (job for job in self.dirty.values() if job.uid not in self._written)
        jobs = list(itertools.islice(first, BACKLOG_AT_ONCE))
        if not jobs:
            return
        pool = self._intake_writers()
        for job in jobs:
            body, said = self._status_of(job)  # here: the next step changes jobs meanwhile
            self._written[job.uid] = said  # as if written; `_settle_behind` undoes a failure
            del self.dirty[job.id]
            sent = pool.submit(self._patch_status, job.id, job.namespace, job.name, body)
            self._behind[job.id] = (job, sent)

    def _settle_behind(self) -> None:
        """The start of a flush: the statuses the last paced flush left writing that have
        ended. One the server never got (unreachable) is queued again; one it refused
        (logged) is forgotten, as in a round: the next change writes the job's status."""
        starting = {i.job.id for i in self.pending if isinstance(i, Create)}
        for job_id, (job, future) in list(self._behind.items()):
            if job_id in starting and future.cancel():
                # still queued and starting now: its first status goes before its pods, in
                # this flush's first round, saying it starts (3 writes, not 4)
                self._unwrite(job)
                self.dirty[job_id] = job
                del self._behind[job_id]
                continue
            if not future.done():
                continue
            del self._behind[job_id]
            failure = future.exception()
            if failure is None and future.result():
                continue
            self._unwrite(job)
            if isinstance(failure, ClusterUnavailable):
                self.dirty.setdefault(job_id, job)
            elif failure is not None:
                log.error("admission status not written: %r", failure)

    def _unwrite(self, job: KubeJob) -> None:
        """Forget a first status counted as written that was not."""
        if self._written.get(job.uid, ("", -1, ""))[1] == job.attempts:
            del self._written[job.uid]

    def _after_behind(self, job: KubeJob | None) -> None:
        """Wait until the job's first status, written behind the last flush, has gone: its
        next status and its objects follow it."""
        behind = self._behind.get(job.id) if job is not None else None
        if behind is not None:
            wait([behind[1]])

    def _each(
        self, send: Callable[[_T], object], items: Sequence[_T], intake: bool = False
    ) -> list[Exception | None]:
        """`send` each item, up to `writers` at once; what each raised (None: done). One at a
        time, an unreachable server stops the rest (they count as not sent). `intake`: on
        the admission path's own writers. While it waits on the others, a flush admits the
        TrainingJobs that came meanwhile every `ADMIT_EVERY` seconds."""
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
        if intake:
            pool = self._intake_writers()
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.writers, thread_name_prefix="caldera-writer")
            pool = self._pool
        if intake:
            futures = [pool.submit(send, item) for item in items]
        else:
            futures = [pool.submit(self._after_intake, send, item) for item in items]
            self._wait_admitting(futures)
        done: list[Exception | None] = []
        for future in futures:  # every one has ended before the caller goes on
            failure = future.exception()
            if failure is not None and not isinstance(failure, Exception):
                raise failure
            done.append(failure)
        return done

    def _intake_writers(self) -> ThreadPoolExecutor:
        """The admission path's own writers: a newcomer's status never queues behind the
        backlog's writes."""
        if self._intake_pool is None:
            self._intake_pool = ThreadPoolExecutor(
                self.writers, thread_name_prefix="caldera-intake"
            )
        return self._intake_pool

    def _after_intake(self, send: Callable[[_T], object], item: _T) -> object:
        """`send(item)` once the admission path has no write under way."""
        self._intake_idle.wait()
        return send(item)

    def _wait_admitting(self, futures: Sequence[Future[object]]) -> None:
        """Wait for `futures`; each `ADMIT_EVERY` seconds meanwhile, admit newcomers."""
        while True:
            since = self._admitted_at
            if since is None or self.paced:  # a paced flush is short: the next step admits
                wait(futures)
                return
            timeout = max(since + ADMIT_EVERY - time.monotonic(), 0.0)
            if not wait(futures, timeout=timeout).not_done:
                return
            self._admit_meanwhile()

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
        raised = self._each(self._write_rejection, rejections)
        failed = [r for r, e in zip(rejections, raised, strict=True) if e is not None]
        self.rejections = failed + self.rejections[len(rejections) :]  # + those of meanwhile
        self._raise_failure(raised)
        self._defer_starts()
        dirty = self._next_statuses(most)
        self._round = {job.id for job in dirty}
        try:
            raised = self._each(self._write_status, dirty)
        finally:
            self._round = set()
        for job, error in zip(dirty, raised, strict=True):
            if error is None and self.dirty.get(job.id) is job:
                del self.dirty[job.id]
        self._raise_failure(raised)

    def _next_statuses(self, most: int) -> list[KubeJob]:
        """The round's jobs: those whose objects wait for their status first (a start's
        pods go right after this round), then the oldest changes — in a paced flush with
        writers to spare, only of jobs whose first status is written: the admissions' go
        behind it (`_write_behind`)."""
        dirty = self.dirty
        chosen: dict[str, KubeJob] = {}
        for intent in self.pending:
            job = _job_of(intent)
            if job is not None and dirty.get(job.id) is job:
                chosen[job.id] = job
                if len(chosen) == most:
                    return list(chosen.values())
        behind = self.paced and self.writers > 1
        for job_id, job in dirty.items():
            if len(chosen) == most:
                break
            if not behind or job.uid in self._written:
                chosen.setdefault(job_id, job)
        return list(chosen.values())

    def _defer_starts(self) -> None:
        """Move out of `dirty` the starts whose status can follow their pods (see the
        module's docstring): jobs started and not yet running, whose last status this
        controller wrote says nothing of this attempt (it said Pending, or an earlier
        attempt; a first status went before the objects and named it), less than
        `_fold_for` what it said ago. Their status is written at a later flush: once their
        pods run, or once that time is up (then it says Starting)."""
        now = self.clock()
        written = self._written
        for job_id, job in list(self.dirty.items()):
            said = written.get(job.uid)
            if (
                said is not None
                and said[1] < job.attempts
                and job.state is JobState.RUNNING
                and job.running_since is None
                and job.start_time is not None
                and now - job.start_time < _fold_for(said[2])
            ):
                self._after_pods[job_id] = self.dirty.pop(job_id)

    def _write_status(self, job: KubeJob) -> None:
        """Patch the job's status unless it is what this controller last wrote: a job marked
        changed for the snapshot only (a pod seen bound) needs no write (issue 40: a third
        status patch per start)."""
        self._after_behind(job)
        body, said = self._status_of(job)
        if self._written.get(job.uid, ("", 0, ""))[:2] == said[:2]:
            return
        if self._patch_status(job.id, job.namespace, job.name, body):
            with self._lock:
                self._written[job.uid] = said

    def _status_of(self, job: KubeJob) -> tuple[Object, tuple[str, int, str]]:
        """The job's status and how `_written` records it once written."""
        body = status_body(job, self.keys)
        said = json.dumps(body, sort_keys=True, default=str)
        return body, (said, job.attempts, str(body.get("state")))

    def _write_rejection(self, rejection: tuple[str, str, Object]) -> bool:
        """A refused TrainingJob's status (namespace, name, body): whether it was written."""
        namespace, name, body = rejection
        return self._patch_status(f"{namespace}/{name}", namespace, name, body)

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
            key = intent_group(item[1]) if self.writers > 1 else None
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
        job = _job_of(intent)
        return job is not None and job.id in self.dirty

    def _carry_out_group(self, group: deque[tuple[int, Intent]]) -> None:
        while True:
            with self._lock:
                if not group:
                    return
                item = group.popleft()
            self._intake_idle.wait()  # the admissions' writes go first
            self._after_behind(_job_of(item[1]))
            try:
                self._carry_out(item[1])
            except ClusterUnavailable:
                with self._lock:
                    group.appendleft(item)  # it stays first in line, the rest behind it
                raise

    def _send_events(self) -> None:
        events = merge_per_job([*self._carried, *self.events])
        self.events, self._carried = [], []
        now = self.clock()
        numbered = []
        for event in events:
            if event.reason is Reason.ADMITTED and now - event.time < ADMITTED_WAITS:
                self._held.append(event)  # nothing more said of the job yet: wait for it
                continue
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
