"""Accepting submissions: each admitted, a group committed in one transaction, then live.

The API's submissions reach the runtime in groups (`caldera.service.intake.GroupWorker`;
`Runtime.enqueue`). `accept` takes a group through four steps, and every caller gets an
answer whatever happens:

1. the per-user limits (`Submission.admit`: may ask the database, so outside the lock);
2. under the runtime lock, each request becomes its job (`admit`: its `JobSpec` from the
   request record — `RequestRecord.spec`, the one conversion — a time-sharing queue's share,
   the core's admission: Rejected, Held or Pending);
3. the admitted jobs' rows, events and audit rows are committed in one transaction, outside
   the lock (a cycle never waits for a commit, nor a commit for a cycle); if it fails each
   is tried alone, so one bad submission fails only itself;
4. under the lock again, the committed jobs join the live set and the loop is woken: a row
   is committed before its job joins, so nothing can start or change it first.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from caldera.core import admit as core_admit
from caldera.errors import Rejected
from caldera.model import JobState, QueueState, shares_time, time_share
from caldera.runtime.requests import RequestRecord
from caldera.service.intake import Submission
from caldera.service.jobs import LiveJob

if TYPE_CHECKING:
    from caldera.service.runtime import Runtime

__all__ = ["accept", "admit"]


@dataclass
class _Accepted:
    """A submission admitted in a group: its job, row, events and audit row."""

    submission: Submission
    job: LiveJob
    row: dict[str, Any]
    events: list[dict[str, Any]]
    audit: list[dict[str, Any]] = field(default_factory=list)


def accept(runtime: Runtime, group: list[Submission]) -> None:
    """Admit each submission of `group`, commit the admitted ones together, let them join
    the live set (the module's steps). An exception that escapes is given to every caller
    not yet answered, then raised."""
    try:
        _accept_group(runtime, group)
    except Exception as error:
        for submission in group:
            if not submission.future.done():
                submission.future.set_exception(error)
        raise


def _accept_group(runtime: Runtime, group: list[Submission]) -> None:
    limited: list[Submission] = []
    for submission in group:
        if not submission.future.set_running_or_notify_cancel():
            continue  # its caller gave up before it was taken: nothing was stored
        try:
            if submission.admit is not None:
                submission.admit()  # per-user limits: may ask the database, so no lock
        except Exception as error:
            submission.future.set_exception(error)
            continue
        limited.append(submission)
    admitted: list[_Accepted] = []
    with runtime.lock:
        for submission in limited:
            try:
                job, events = admit(runtime, submission.request, submission.user)
            except Exception as error:  # Rejected, ValueError
                submission.future.set_exception(error)
                continue
            admitted.append(_Accepted(submission, job, job.row(), events))
    ready: list[_Accepted] = []
    for one in admitted:
        try:
            if one.submission.audit is not None:
                one.audit.append(one.submission.audit(one.row))
        except Exception as error:
            one.submission.future.set_exception(error)
            continue
        ready.append(one)
    committed = _commit_each(runtime, ready)
    if not committed:
        return
    with runtime.lock:
        for one in committed:
            runtime.jobs[one.job.id] = one.job
            runtime.kernel.stale.add(one.job.id)
        asleep = not runtime.loop.needed  # else the loop wakes for the cycle already
        runtime.loop.needed = True
    if asleep:
        runtime.wake.set()
    for one in committed:
        one.submission.future.set_result(one.row)


def _commit_each(runtime: Runtime, group: list[_Accepted]) -> list[_Accepted]:
    """Commit the group in one transaction; if that fails, each alone. What committed."""
    if not group:
        return []
    try:
        _commit(runtime, group)
        return group
    except Exception as error:
        if len(group) == 1:
            group[0].submission.future.set_exception(error)
            return []
    committed = []
    for one in group:
        try:
            _commit(runtime, [one])
        except Exception as error:
            one.submission.future.set_exception(error)
            continue
        committed.append(one)
    return committed


def _commit(runtime: Runtime, group: list[_Accepted]) -> None:
    """One transaction: the jobs' rows, their events and their audit rows."""
    runtime.store.append(
        [one.row for one in group],
        [event for one in group for event in one.events],
        [row for one in group for row in one.audit],
    )


def admit(
    runtime: Runtime, request: RequestRecord, user: str
) -> tuple[LiveJob, list[dict[str, Any]]]:
    """The new job and its events, or Rejected / ValueError (caller holds the lock)."""
    now = runtime.clock()
    job_id = "j-" + secrets.token_hex(6)
    spec = request.spec(job_id, now, user)
    queue = runtime.queues.get(spec.queue)
    if shares_time(spec, queue):  # kept in the request: a restart rebuilds the same spec
        spec = time_share(spec, queue)
        request = request.shared_as(spec)
    week_offset = runtime.policy_config.week_offset
    admission = core_admit(spec, runtime.queues, runtime.throttles, now, runtime.nodes, week_offset)
    if admission.state is JobState.REJECTED:
        closed = queue is not None and queue.state is not QueueState.OPEN
        raise Rejected(admission.reason, closed)
    job = LiveJob(spec=spec, request=request, state=admission.state)
    events = [{"t": now, "kind": "submit", "job": job_id, "data": {"user": user}}]
    if admission.state is JobState.HELD:
        job.hold_reason = admission.reason
        job.hold_since = now
        events.append(
            {"t": now, "kind": "hold", "job": job_id, "data": {"reason": admission.reason}}
        )
    return job, events
