"""/v1/jobs/{id}/logs: a task's output, whole, its tail, or followed until the job ends.

Following polls the log file; it asks the runtime only whether the job is still live (a
read view), never takes the runtime's lock.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, BinaryIO

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from caldera.service.api.auth import Caller
from caldera.service.api.jobs import owned
from caldera.service.launcher import JobFiles
from caldera.service.logfiles import tail as tail_lines
from caldera.service.views import ServiceRuntime

__all__ = ["follow_log", "read_tail", "router"]

router = APIRouter(tags=["jobs"])

_POLL = 0.2  # seconds between two looks at a followed log
_BLOCK = 64 * 1024
_TAIL_BYTES = 8 * 1024 * 1024  # a tail returns at most this much, whatever the lines


@router.get("/jobs/{job_id}/logs", response_class=PlainTextResponse)
def logs(
    job_id: str,
    who: Caller,
    request: Request,
    rank: Annotated[int, Query(ge=0)] = 0,
    tail: Annotated[int | None, Query(ge=0, description="Last N lines only")] = None,
    follow: Annotated[bool, Query(description="Stream until the job ends")] = False,
) -> Response:
    """A task's output (stdout and stderr, every attempt appended; the runner keeps the
    newest `logs.max_bytes` × (`logs.keep` + 1) bytes, this shows the current file). A tail
    is read from the end of the file: it costs what it returns (at most 8 MiB)."""
    runtime: ServiceRuntime = request.app.state.runtime
    row = owned(runtime, job_id, who)
    if rank >= row["request"]["tasks"]:
        raise HTTPException(400, f"job {job_id} has no task {rank}")
    path = JobFiles(runtime.data_dir, job_id).log(rank)
    if not follow:
        if tail is not None:
            return Response(read_tail(path, tail), media_type="text/plain; charset=utf-8")
        return StreamingResponse(
            _whole(_open(path), close=True), media_type="text/plain; charset=utf-8"
        )
    handle = _open(path)
    if tail is not None:
        first: Iterator[bytes] = iter([read_tail(path, tail)])
        if handle is not None:
            handle.seek(0, os.SEEK_END)
    else:
        first = _whole(handle, close=False)
    return StreamingResponse(
        follow_log(runtime, job_id, path, handle, first), media_type="text/plain; charset=utf-8"
    )


def _open(path: Path) -> BinaryIO | None:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


def _whole(handle: BinaryIO | None, close: bool) -> Iterator[bytes]:
    """The file from where `handle` is to its end when asked, in blocks (never all of it in
    memory at once)."""
    if handle is None:
        return
    try:
        end = os.fstat(handle.fileno()).st_size
        while handle.tell() < end:
            block = handle.read(min(_BLOCK, end - handle.tell()))
            if not block:
                break
            yield block
    finally:
        if close:
            handle.close()


def read_tail(path: Path, lines: int) -> bytes:
    """The last `lines` lines, read from the end (at most the last 8 MiB)."""
    return tail_lines(path, lines, _TAIL_BYTES)


async def follow_log(
    runtime: ServiceRuntime,
    job_id: str,
    path: Path,
    handle: BinaryIO | None,
    first: Iterator[bytes],
) -> AsyncIterator[bytes]:
    """Yield what was asked first, then what is written after it until the job has ended and
    the file is drained. When the runner rotates the log, the old file is read to its end,
    then the new one from its start."""
    for chunk in first:
        yield chunk
    try:
        while True:
            live = runtime.is_live(job_id)
            chunk = handle.read(_BLOCK) if handle is not None else b""
            if chunk:
                yield chunk
                continue
            fresh = _open(path)
            if fresh is not None and (
                handle is None
                or os.fstat(fresh.fileno()).st_ino != os.fstat(handle.fileno()).st_ino
            ):
                if handle is not None:
                    handle.close()
                handle = fresh  # rotated (or created): the new file from its start
                continue
            if fresh is not None:
                fresh.close()
            if not live:
                return
            await asyncio.sleep(_POLL)
    finally:
        if handle is not None:
            handle.close()
