"""Processes on this host: spawning a task, checking it is still the same process, signalling
its group. Linux (`/proc`) only.

A pid alone is not an identity: after a restart the service checks pid *and* the process's
start time (`/proc/PID/stat`, field 22) before it adopts or signals anything, so a recycled
pid never gets a job's SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import stat
from pathlib import Path
from typing import Any

__all__ = [
    "process_alive",
    "process_start_ticks",
    "read_report",
    "signal_group",
    "write_atomic",
]

_REPORT_BYTES = 64 * 1024
_MAX_STEP = 2**31 - 1  # a checkpoint step must fit the database's INTEGER column


def process_start_ticks(pid: int) -> int | None:
    """Clock ticks after boot at which `pid` started, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie has finished; only its exit status is left
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: int | None, start_ticks: int | None) -> bool:
    """Is `pid` still the very process that started at `start_ticks`?"""
    if not pid:
        return False
    ticks = process_start_ticks(pid)
    return ticks is not None and (start_ticks is None or ticks == start_ticks)


def signal_group(pid: int | None, start_ticks: int | None, signum: signal.Signals) -> bool:
    """Signal the process group led by `pid` if that leader is still the same process."""
    if not process_alive(pid, start_ticks):
        return False
    assert pid is not None
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def write_atomic(path: Path, text: str) -> None:
    """Write `text` so that a reader sees the old content or the new, never half of it. The
    file is readable by its owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        with contextlib.suppress(OSError):
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_report(path: Path, seen: float | None) -> tuple[float, dict[str, Any]] | None:
    """A status file a job wrote (`caldera.sdk.preemption`), read safely by the server: by
    name, only if it changed since `seen` (its mtime), never through a link, never a FIFO or
    device (opening one must not block the loop), at most 64 KiB. Returns (mtime, report)
    with only well-formed fields kept: `progress` a finite number in [0, 1]; `checkpoint`
    with a finite `time` and an integer `step` in [0, 2^31). None when there is nothing new.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_mtime == seen:
            return None
        data = os.read(fd, _REPORT_BYTES + 1) if info.st_size <= _REPORT_BYTES else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        raw = json.loads(data) if 0 < len(data) <= _REPORT_BYTES else None
    except (ValueError, RecursionError):
        raw = None
    report: dict[str, Any] = {}
    if isinstance(raw, dict):
        progress = _number(raw.get("progress"))
        if progress is not None:
            report["progress"] = min(max(progress, 0.0), 1.0)
        checkpoint = raw.get("checkpoint")
        at = _number(checkpoint.get("time")) if isinstance(checkpoint, dict) else None
        if isinstance(checkpoint, dict) and at is not None:
            step = checkpoint.get("step")
            ok = isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= _MAX_STEP
            report["checkpoint"] = {"time": at, "step": step if ok else None}
    return info.st_mtime, report


def _number(value: object) -> float | None:
    """A finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return number if math.isfinite(number) else None
