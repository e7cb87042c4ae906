"""/v1/jobs/{id}/logs: a task's output, whole, its tail, or followed until the job ends.

Following polls the log file; it asks the runtime only whether the job is still live (a
read view), never takes the runtime's lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from caldera.service.api.auth import Caller
from caldera.service.api.jobs import owned
from caldera.service.launcher import JobFiles
from caldera.service.views import ServiceRuntime

__all__ = ["follow_log", "read_tail", "router"]

router = APIRouter(tags=["jobs"])

_POLL = 0.2  # seconds between two looks at a followed log


@router.get("/jobs/{job_id}/logs", response_class=PlainTextResponse)
def logs(
    job_id: str,
    who: Caller,
    request: Request,
    rank: Annotated[int, Query(ge=0)] = 0,
    tail: Annotated[int | None, Query(ge=0, description="Last N lines only")] = None,
    follow: Annotated[bool, Query(description="Stream until the job ends")] = False,
) -> Response:
    """A task's output (stdout and stderr, every attempt appended)."""
    runtime: ServiceRuntime = request.app.state.runtime
    row = owned(runtime, job_id, who)
    if rank >= row["request"]["tasks"]:
        raise HTTPException(400, f"job {job_id} has no task {rank}")
    path = JobFiles(runtime.data_dir, job_id).log(rank)
    data, size = read_tail(path, tail)
    if not follow:
        return Response(data, media_type="text/plain; charset=utf-8")
    return StreamingResponse(
        follow_log(runtime, job_id, path, data, size), media_type="text/plain; charset=utf-8"
    )


def read_tail(path: Path, lines: int | None) -> tuple[bytes, int]:
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


async def follow_log(
    runtime: ServiceRuntime, job_id: str, path: Path, first: bytes, offset: int
) -> AsyncIterator[bytes]:
    """Yield what is written after `offset` until the job has ended and the file is drained."""
    if first:
        yield first
    while True:
        live = runtime.is_live(job_id)
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
        await asyncio.sleep(_POLL)
