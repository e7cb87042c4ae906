"""The REST API (FastAPI); its OpenAPI schema is served at /openapi.json and /docs.

Every route but /healthz and /metrics needs `Authorization: Bearer TOKEN`. Errors are JSON
`{"detail": "one line"}` with a typed status: 400 invalid request, 401 no or bad token,
403 not allowed (a queue not in the token's list, `critical` without permission, another
user's job, an admin route), 404 no such job or queue, 409 the queue is not Open or the job
has already ended.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from caldera.model import (
    GPU_MILLI,
    JobState,
    JobType,
    QueueState,
    parse_cpu,
    parse_gpu_milli,
    parse_memory_mib,
    priority_class,
)
from caldera.service.config import Principal
from caldera.service.launcher import JobFiles
from caldera.service.metrics import CONTENT_TYPE
from caldera.service.runtime import Conflict, NotFound, Rejected, Runtime

__all__ = ["JobOut", "JobRequest", "ServerTiming", "create_app", "iso"]

API_VERSION = "v1"


def iso(t: float | None) -> str | None:
    """Unix time as ISO 8601 UTC (`2026-11-29T09:36:16.123Z`)."""
    if t is None:
        return None
    text = datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


# -- request and resource models ---------------------------------------------------------------


class TopologyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["hard", "soft"] = "soft"
    highest_tier: Literal[1, 2] = 1


class CheckpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval: float | None = Field(default=None, gt=0, description="Seconds between checkpoints")
    cost: float = Field(default=0.0, ge=0, description="Seconds one checkpoint takes")
    on_sigterm: bool = Field(default=True, description="Writes an emergency checkpoint on SIGTERM")


class JobRequest(BaseModel):
    """A submission. GPUs are per task; a fraction (e.g. 0.5) only for a single task."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=255)
    queue: str = Field(min_length=1)
    type: JobType = JobType.NORMAL
    tasks: int = Field(default=1, ge=1, le=4096)
    gpus: float = Field(default=1.0, ge=0, allow_inf_nan=False, description="GPUs per task")
    min_available: int | None = Field(default=None, ge=1, description="Gang size (default tasks)")
    cpu: float | str | None = Field(default=None, description="CPU per task: 4 or '500m'")
    memory: int | str | None = Field(default=None, description="Memory per task: '16Gi' or MiB")
    command: list[str] = Field(min_length=1, description="argv of each task")
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(default=None, description="Working directory of the tasks")
    labels: dict[str, str] = Field(default_factory=dict)
    topology: TopologyIn | None = None
    expected_duration: float | None = Field(default=None, gt=0, description="Seconds")
    checkpoint: CheckpointIn | None = None
    max_retries: int = Field(default=0, ge=0, le=100)
    gpu_model: list[str] | None = None

    def normalised(self) -> dict[str, Any]:
        """The stored request: units resolved, defaults filled. Raises ValueError."""
        gpu = parse_gpu_milli(self.gpus)
        if 0 < gpu < GPU_MILLI and self.tasks != 1:
            raise ValueError("fractional GPUs are allowed only for a single task")
        if self.min_available is not None and self.min_available > self.tasks:
            raise ValueError(f"min_available ({self.min_available}) exceeds tasks ({self.tasks})")
        if not self.command[0]:
            raise ValueError("command: the program name is empty")
        if self.workdir is not None and not Path(self.workdir).is_absolute():
            raise ValueError("workdir must be an absolute path")
        checkpoint = self.checkpoint or CheckpointIn()
        return {
            "name": self.name or self.command[0].rsplit("/", 1)[-1][:64],
            "queue": self.queue,
            "type": self.type.value,
            "tasks": self.tasks,
            "gpu": gpu,
            "cpu": parse_cpu(self.cpu) if self.cpu is not None else 0,
            "memory": parse_memory_mib(self.memory) if self.memory is not None else 0,
            "min_available": self.min_available or self.tasks,
            "command": list(self.command),
            "env": dict(self.env),
            "workdir": self.workdir,
            "labels": dict(self.labels),
            "topology": self.topology.model_dump() if self.topology else None,
            "expected_duration": self.expected_duration,
            "checkpoint": checkpoint.model_dump(),
            "max_retries": self.max_retries,
            "gpu_model": self.gpu_model,
        }


class TaskOut(BaseModel):
    rank: int
    node: str
    devices: list[int]
    gpu: float
    pid: int | None
    state: Literal["running", "releasing", "exited"]
    exit_code: int | None


class JobOut(BaseModel):
    """A job resource (DESIGN §8). Times are ISO 8601 UTC; `start_time` is the first start."""

    id: str
    name: str
    user: str
    queue: str
    type: str
    priority_class: str
    state: str
    submit_time: str
    start_time: str | None
    end_time: str | None
    last_start_time: str | None
    evictions: int
    exit_code: int | None
    tasks: int
    gpus_per_task: float
    # N: each task is one of N time-sharing a GPU, no memory isolation (docs/gpus.md); 0: not
    time_shared: int = 0
    min_available: int
    command: list[str]
    labels: dict[str, str]
    hold_reason: str | None
    reason: str | None
    attempts: int
    retries: int
    lost_gpu_seconds: float
    checkpoint_step: int | None
    progress: float | None
    placement: list[TaskOut]


class EventOut(BaseModel):
    id: int
    time: str
    kind: str
    job: str | None
    data: dict[str, Any]


class QueueOut(BaseModel):
    name: str
    state: str
    weight: int
    deserved_gpus: float | None
    guarantee_gpus: float | None
    capability_gpus: float | None
    reclaimable: bool
    allocated_gpus: float
    pending: int
    held: int
    running: int
    throttled_for: str | None


class QueuePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: Literal["Open", "Closing", "Closed"]


class GPUOut(BaseModel):
    index: int
    free: float
    jobs: list[str]
    uuid: str | None = None  # what CUDA_VISIBLE_DEVICES names (None: a virtual GPU)
    drained: str | None = None  # why the GPU takes no new work (docs/gpus.md), None: healthy


class NodeOut(BaseModel):
    name: str
    gpu_model: str
    gpus: list[GPUOut]


class ClusterOut(BaseModel):
    gpus: int
    gpus_allocated: float
    nodes: list[NodeOut]
    throttles: dict[str, str]
    jobs: dict[str, int]


class WhoAmI(BaseModel):
    user: str
    queues: list[str]
    critical: bool
    admin: bool


def job_out(row: dict[str, Any], node_names: list[str]) -> JobOut:
    request = row["request"]
    placement: list[TaskOut] = []
    for task in row["tasks"] or []:
        where = task["placement"]
        state: Literal["running", "releasing", "exited"] = (
            "exited" if task.get("done") else ("releasing" if task.get("leaving") else "running")
        )
        node = int(where["node"])
        placement.append(
            TaskOut(
                rank=task["rank"],
                node=node_names[node] if node < len(node_names) else str(node),
                devices=list(where["devices"]),
                gpu=where["milli"] * len(where["devices"]) / GPU_MILLI,
                pid=task.get("pid"),
                state=state,
                exit_code=task.get("exit_code"),
            )
        )
    progress = row["reported_progress"]
    return JobOut(
        id=row["id"],
        name=row["name"],
        user=row["user"],
        queue=row["queue"],
        type=row["type"],
        priority_class=priority_class(JobType(row["type"])).name,
        state=row["state"],
        submit_time=iso(row["submit_time"]) or "",
        start_time=iso(row["first_start"]),
        end_time=iso(row["end_time"]),
        last_start_time=iso(row["start_time"]),
        evictions=row["evictions"],
        exit_code=row["exit_code"],
        tasks=request["tasks"],
        gpus_per_task=request["gpu"] / GPU_MILLI,
        time_shared=int(request.get("time_shared", 0)),
        min_available=request.get("min_available") or request["tasks"],
        command=list(request["command"]),
        labels=dict(request.get("labels") or {}),
        hold_reason=row["hold_reason"],
        reason=row["reason"],
        attempts=row["attempts"],
        retries=row["retries"],
        lost_gpu_seconds=round(row["lost_gpu_seconds"], 3),
        checkpoint_step=row["checkpoint_step"],
        progress=progress if progress is None or math.isfinite(progress) else None,
        placement=placement,
    )


# -- the application -------------------------------------------------------------------------


class ServerTiming:
    """Adds `Server-Timing: app;dur=MS` to every response: the time spent inside the server,
    so a client can tell its own queueing from the service's (used by `caldera bench api`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()

        async def timed(message: Any) -> None:
            if message["type"] == "http.response.start":
                elapsed = (time.perf_counter() - began) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={elapsed:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed)


_bearer = HTTPBearer(auto_error=False)


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Who the bearer token says the caller is; 401 without a known token."""
    if credentials is None:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    who: Principal | None = request.app.state.tokens.get(credentials.credentials)
    if who is None:
        raise HTTPException(401, "invalid token", headers={"WWW-Authenticate": "Bearer"})
    return who


Caller = Annotated[Principal, Depends(_principal)]


def create_app(runtime: Runtime, render_metrics: Any, lifespan: Any = None) -> FastAPI:
    """The API over one runtime. `render_metrics()` returns the Prometheus text."""
    app = FastAPI(
        title="caldera",
        lifespan=lifespan,
        version=API_VERSION,
        description="caldera's local service: submit and watch GPU jobs scheduled by the same "
        "decision core as the simulator. Authenticate with `Authorization: Bearer TOKEN`.",
    )
    app.state.tokens = runtime.config.tokens
    app.add_middleware(ServerTiming)
    node_names = [node.name for node in runtime.nodes]

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query"))
        message = first.get("msg", "invalid request")
        if first.get("type") == "extra_forbidden":
            message = "unknown field"
        return JSONResponse({"detail": f"{where}: {message}" if where else message}, 400)

    def owned(job_id: str, who: Principal) -> dict[str, Any]:
        row = runtime.store.job(job_id)
        if row is None:
            raise HTTPException(404, f"no job {job_id}")
        if not who.admin and row["user"] != who.user:
            raise HTTPException(403, f"job {job_id} belongs to another user")
        return row

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(render_metrics(), media_type=CONTENT_TYPE)

    @app.get(f"/{API_VERSION}/whoami", tags=["service"])
    def whoami(who: Caller) -> WhoAmI:
        return WhoAmI(
            user=who.user, queues=sorted(who.queues), critical=who.critical, admin=who.admin
        )

    @app.post(f"/{API_VERSION}/jobs", status_code=201, tags=["jobs"], response_model=JobOut)
    def submit(body: JobRequest, who: Caller) -> Response:
        """Submit a job. 403: queue not allowed or `critical` without permission; 409: the
        queue is Closing or Closed; 400: invalid or impossible request."""
        if body.queue not in runtime.queues:
            raise HTTPException(400, f"unknown queue {body.queue!r}")
        if not who.may_use(body.queue):
            raise HTTPException(403, f"user {who.user} may not submit to queue {body.queue!r}")
        if body.type is JobType.CRITICAL and not who.critical:
            raise HTTPException(403, f"user {who.user} may not submit critical jobs")
        try:
            request = body.normalised()
            row = runtime.submit(request, who.user)
        except Rejected as error:
            raise HTTPException(409 if error.closed else 400, str(error)) from None
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        # Serialised here, once: the hottest route skips FastAPI's re-validation of the model.
        return Response(
            job_out(row, node_names).model_dump_json(),
            status_code=201,
            media_type="application/json",
        )

    @app.get(f"/{API_VERSION}/jobs", tags=["jobs"])
    def list_jobs(
        who: Caller,
        state: Annotated[list[JobState] | None, Query(description="Repeat for several")] = None,
        queue: str | None = None,
        type: JobType | None = None,
        user: Annotated[str | None, Query(description="Admins only; others see their own")] = None,
        limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
    ) -> list[JobOut]:
        if user is not None and user != who.user and not who.admin:
            raise HTTPException(403, "only admins may list other users' jobs")
        owner = user if who.admin else who.user
        rows = runtime.store.jobs(
            user=owner,
            states=[s.value for s in state] if state else None,
            queue=queue,
            job_type=type.value if type else None,
            limit=limit,
            newest_first=True,
        )
        return [job_out(row, node_names) for row in reversed(rows)]

    @app.get(f"/{API_VERSION}/jobs/{{job_id}}", tags=["jobs"])
    def get_job(job_id: str, who: Caller) -> JobOut:
        return job_out(owned(job_id, who), node_names)

    def _cancel(job_id: str, who: Caller) -> JobOut:
        owned(job_id, who)
        try:
            row = runtime.cancel(job_id)
        except NotFound:
            raise HTTPException(404, f"no job {job_id}") from None
        except Conflict as error:
            raise HTTPException(409, str(error)) from None
        return job_out(row, node_names)

    @app.post(f"/{API_VERSION}/jobs/{{job_id}}/cancel", tags=["jobs"])
    def cancel(job_id: str, who: Caller) -> JobOut:
        """Cancel: a waiting job ends at once; a running one gets SIGTERM, the grace period,
        then SIGKILL, and ends Cancelled. 409 if it has already ended."""
        return _cancel(job_id, who)

    @app.delete(f"/{API_VERSION}/jobs/{{job_id}}", tags=["jobs"])
    def delete_job(job_id: str, who: Caller) -> JobOut:
        """Same as POST …/cancel."""
        return _cancel(job_id, who)

    @app.get(f"/{API_VERSION}/jobs/{{job_id}}/events", tags=["jobs"])
    def job_events(job_id: str, who: Caller) -> list[EventOut]:
        owned(job_id, who)
        return [_event_out(e) for e in runtime.store.events(job=job_id, limit=100000)]

    @app.get(
        f"/{API_VERSION}/jobs/{{job_id}}/logs",
        tags=["jobs"],
        response_class=PlainTextResponse,
    )
    def logs(
        job_id: str,
        who: Caller,
        rank: Annotated[int, Query(ge=0)] = 0,
        tail: Annotated[int | None, Query(ge=0, description="Last N lines only")] = None,
        follow: Annotated[bool, Query(description="Stream until the job ends")] = False,
    ) -> Response:
        """A task's output (stdout and stderr, every attempt appended)."""
        row = owned(job_id, who)
        if rank >= row["request"]["tasks"]:
            raise HTTPException(400, f"job {job_id} has no task {rank}")
        path = JobFiles(runtime.data_dir, job_id).log(rank)
        data, size = _read_tail(path, tail)
        if not follow:
            return Response(data, media_type="text/plain; charset=utf-8")
        return StreamingResponse(
            _follow(runtime, job_id, path, data, size), media_type="text/plain; charset=utf-8"
        )

    @app.get(f"/{API_VERSION}/events", tags=["service"])
    def events(
        who: Caller,
        after: Annotated[int, Query(ge=0, description="Only events with a larger id")] = 0,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    ) -> list[EventOut]:
        """Scheduling events, oldest first; non-admins see their own jobs' events."""
        rows = runtime.store.events(after=after, limit=limit)
        if not who.admin:
            mine = {
                row["id"] for row in runtime.store.jobs(user=who.user) if row["user"] == who.user
            }
            rows = [row for row in rows if row["job"] in mine]
        return [_event_out(row) for row in rows]

    @app.get(f"/{API_VERSION}/cluster", tags=["service"])
    def cluster(who: Caller) -> ClusterOut:
        """Nodes, each device's free share and who holds it, waiting modes, job counts."""
        del who
        holders: dict[tuple[int, int], list[str]] = {}
        counts: dict[str, int] = {}
        with runtime.lock:
            free = [list(f) for f in runtime.room.free]
            throttles = {q: t.job for q, t in runtime.throttles.items()}
            for job in runtime.jobs.values():
                counts[job.state.value] = counts.get(job.state.value, 0) + 1
                for task in job.tasks:
                    for device in task.placement.devices:
                        holders.setdefault((task.placement.node, device), []).append(job.id)
            watch = runtime.gpu_watch
            sick = watch.reasons() if watch is not None else {}
            held = watch.held_milli if watch is not None else 0
        host = runtime.host
        nodes = [
            NodeOut(
                name=node.name,
                gpu_model=node.gpu_model,
                gpus=[
                    GPUOut(
                        index=d,
                        free=free[node.index][d] / GPU_MILLI,
                        jobs=holders.get((node.index, d), []),
                        uuid=host.uuid(d) if host is not None else None,
                        drained=sick.get(d),
                    )
                    for d in range(node.gpus)
                ],
            )
            for node in runtime.nodes
        ]
        total = sum(node.gpus for node in runtime.nodes)
        used = total - (sum(sum(f) for f in free) + held) / GPU_MILLI
        return ClusterOut(
            gpus=total, gpus_allocated=used, nodes=nodes, throttles=throttles, jobs=counts
        )

    @app.get(f"/{API_VERSION}/queues", tags=["queues"])
    def queues(who: Caller) -> list[QueueOut]:
        del who
        return _queues_out(runtime)

    @app.patch(f"/{API_VERSION}/queues/{{name}}", tags=["queues"])
    def patch_queue(name: str, body: QueuePatch, who: Caller) -> QueueOut:
        """Admins: open, drain (Closing) or close a queue. Kept across restarts."""
        if not who.admin:
            raise HTTPException(403, "only admins may change queues")
        try:
            runtime.set_queue_state(name, QueueState(body.state))
        except NotFound:
            raise HTTPException(404, f"no queue {name!r}") from None
        return next(q for q in _queues_out(runtime) if q.name == name)

    return app


def _gpus(value: Any) -> float | None:
    return value.gpu / GPU_MILLI if value is not None and value.gpu > 0 else None


def _queues_out(runtime: Runtime) -> list[QueueOut]:
    with runtime.lock:
        out = []
        for name, queue in runtime.queues.items():
            jobs = [j for j in runtime.jobs.values() if j.spec.queue == name]
            waiting = runtime.throttles.get(name)
            out.append(
                QueueOut(
                    name=name,
                    state=queue.state.value,
                    weight=queue.weight,
                    deserved_gpus=_gpus(queue.deserved),
                    guarantee_gpus=_gpus(queue.guarantee),
                    capability_gpus=_gpus(queue.capability),
                    reclaimable=queue.reclaimable,
                    allocated_gpus=sum(t.placement.gpu for j in jobs for t in j.tasks) / GPU_MILLI,
                    pending=sum(j.state is JobState.PENDING for j in jobs),
                    held=sum(j.state is JobState.HELD for j in jobs),
                    running=sum(j.state in (JobState.RUNNING, JobState.RELEASING) for j in jobs),
                    throttled_for=waiting.job if waiting else None,
                )
            )
        return out


def _event_out(row: dict[str, Any]) -> EventOut:
    return EventOut(
        id=row["id"], time=iso(row["t"]) or "", kind=row["kind"], job=row["job"], data=row["data"]
    )


def _read_tail(path: Path, lines: int | None) -> tuple[bytes, int]:
    """The last `lines` lines (all without a number) and the size read so far."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b"", 0
    if lines is None:
        return data, len(data)
    if lines == 0:
        return b"", len(data)
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:]), len(data)


async def _follow(
    runtime: Runtime, job_id: str, path: Path, first: bytes, offset: int
) -> AsyncIterator[bytes]:
    """Yield what is written after `offset` until the job has ended and the file is drained."""
    if first:
        yield first
    while True:
        with runtime.lock:
            live = job_id in runtime.jobs
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if not live:
            return
        await asyncio.sleep(0.2)
