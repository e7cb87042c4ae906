"""/v1/jobs: submit, list, show, cancel, and a job's events."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response

from caldera.config import Principal
from caldera.errors import Conflict, NotFound, Rejected
from caldera.model import JobState, JobType
from caldera.service.api.auth import Caller
from caldera.service.api.schemas import EventOut, JobOut, JobRequest, event_out, job_out
from caldera.service.audit import audit_entry
from caldera.service.intake import Submission
from caldera.service.isolation import Isolation
from caldera.service.limits import Admission, LimitError, Limits, RateLimiter, check_sizes
from caldera.service.views import ServiceRuntime

__all__ = ["owned", "protection_labels", "router"]

router = APIRouter(tags=["jobs"])

_AUDITED = ("type", "tasks", "gpus_per_task")  # what the audit keeps of an accepted job


def _runtime(request: Request) -> ServiceRuntime:
    runtime: ServiceRuntime = request.app.state.runtime
    return runtime


def _node_names(runtime: ServiceRuntime) -> list[str]:
    return [node.name for node in runtime.nodes]


def owned(runtime: ServiceRuntime, job_id: str, who: Principal) -> dict[str, Any]:
    """The job's row if the caller may see it: 404 if there is none, 403 if it is not theirs."""
    row = runtime.store.job(job_id)
    if row is None:
        raise HTTPException(404, f"no job {job_id}")
    if not who.admin and row["user"] != who.user:
        raise HTTPException(403, f"job {job_id} belongs to another user")
    return row


def protection_labels(labels: dict[str, str]) -> list[str]:
    """The labels that shield a job from preemption: `protected`, and every key under
    `caldera.io/` (reserved: `caldera.io/system` makes a job conformance-protected)."""
    return [k for k in labels if k.lower() == "protected" or k.lower().startswith("caldera.io/")]


@router.post("/jobs", status_code=201, response_model=JobOut)
async def submit(body: JobRequest, who: Caller, request: Request) -> Response:
    """Submit a job. 403: queue not allowed, or `critical` or protection labels without
    permission; 409: the queue is Closing or Closed; 400: invalid or impossible request, or
    over a size limit; 429: over the user's submission rate or waiting jobs (`Retry-After`).

    Async: the checks here are CPU only, and the admission and the commit happen in the
    runtime's intake thread, together with every other submission waiting
    (`Runtime.enqueue`), so a submission costs no worker thread and shares its commit."""
    runtime = _runtime(request)
    if not runtime.has_queue(body.queue):
        raise HTTPException(400, f"unknown queue {body.queue!r}")
    if not who.may_use(body.queue):
        raise HTTPException(403, f"user {who.user} may not submit to queue {body.queue!r}")
    if body.type is JobType.CRITICAL and not who.critical:
        raise HTTPException(403, f"user {who.user} may not submit critical jobs")
    shields = protection_labels(body.labels)
    if shields and not who.protect:
        raise HTTPException(403, f"user {who.user} may not set the protection label {shields[0]!r}")
    limits: Limits = request.app.state.limits
    admission: Admission = request.app.state.admission
    try:
        record = body.record()
        check_sizes(limits, record)
    except LimitError as error:
        raise _limit_error(error) from None
    except ValueError as error:
        raise HTTPException(400, str(error)) from None
    isolation: Isolation | None = request.app.state.isolation
    if isolation is not None and record.workdir is not None:
        problem = isolation.workdir_problem(who.user, record.workdir)
        if problem is not None:
            raise HTTPException(400, problem)
    # Whether the job's own progress claims may defend it (DESIGN §4.2; docs/service.md).
    record = replace(record, trust_progress=who.trust_progress)
    names = _node_names(runtime)
    entry = audit_entry(request.scope)
    answer: list[JobOut] = []
    audited = None
    if entry is not None:

        def audited(row: dict[str, Any]) -> dict[str, Any]:
            """The audit row, committed with the job's (`caldera.service.audit`)."""
            out = job_out(row, names)
            answer.append(out)
            return entry.accepted(201, out.model_dump(include={"id", *_AUDITED}))

    submission = Submission(
        record, who.user, admit=lambda: admission.admit(who.user), audit=audited
    )
    try:
        row = await asyncio.wrap_future(runtime.enqueue(submission))
    except LimitError as error:
        raise _limit_error(error) from None
    except Rejected as error:
        raise HTTPException(409 if error.closed else 400, str(error)) from None
    except ValueError as error:
        raise HTTPException(400, str(error)) from None
    if entry is not None:
        entry.written = 201
    out = answer[0] if answer else job_out(row, names)
    # Serialised here, once: the hottest route skips FastAPI's re-validation of the model.
    return Response(out.model_dump_json(), status_code=201, media_type="application/json")


def _limit_error(error: LimitError) -> HTTPException:
    headers = None
    if error.retry_after is not None:
        headers = {"Retry-After": RateLimiter.retry_after(error.retry_after)}
    return HTTPException(error.status, str(error), headers=headers)


@router.get("/jobs")
def list_jobs(
    who: Caller,
    request: Request,
    state: Annotated[list[JobState] | None, Query(description="Repeat for several")] = None,
    queue: str | None = None,
    type: JobType | None = None,
    user: Annotated[str | None, Query(description="Admins only; others see their own")] = None,
    limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
) -> list[JobOut]:
    if user is not None and user != who.user and not who.admin:
        raise HTTPException(403, "only admins may list other users' jobs")
    runtime = _runtime(request)
    owner = user if who.admin else who.user
    rows = runtime.store.jobs(
        user=owner,
        states=[s.value for s in state] if state else None,
        queue=queue,
        job_type=type.value if type else None,
        limit=limit,
        newest_first=True,
    )
    names = _node_names(runtime)
    return [job_out(row, names) for row in reversed(rows)]


@router.get("/jobs/{job_id}")
def get_job(job_id: str, who: Caller, request: Request) -> JobOut:
    runtime = _runtime(request)
    return job_out(owned(runtime, job_id, who), _node_names(runtime))


def _cancel(runtime: ServiceRuntime, job_id: str, who: Principal) -> JobOut:
    owned(runtime, job_id, who)
    try:
        row = runtime.cancel(job_id)
    except NotFound:
        raise HTTPException(404, f"no job {job_id}") from None
    except Conflict as error:
        raise HTTPException(409, str(error)) from None
    return job_out(row, _node_names(runtime))


@router.post("/jobs/{job_id}/cancel")
def cancel(job_id: str, who: Caller, request: Request) -> JobOut:
    """Cancel: a waiting job ends at once; a running one gets SIGTERM, the grace period,
    then SIGKILL, and ends Cancelled. 409 if it has already ended."""
    return _cancel(_runtime(request), job_id, who)


@router.delete("/jobs/{job_id}")
def delete_job(job_id: str, who: Caller, request: Request) -> JobOut:
    """Same as POST …/cancel."""
    return _cancel(_runtime(request), job_id, who)


@router.get("/jobs/{job_id}/events")
def job_events(job_id: str, who: Caller, request: Request) -> list[EventOut]:
    runtime = _runtime(request)
    owned(runtime, job_id, who)
    return [event_out(e) for e in runtime.store.events(job=job_id, limit=100000)]
