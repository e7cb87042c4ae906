"""Processes on this host: spawning a task, checking it is still the same process, signalling
its group. Linux (`/proc`) only.

A pid alone is not an identity: after a restart the service checks pid *and* the process's
start time (`/proc/PID/stat`, field 22) before it adopts or signals anything, so a recycled
pid never gets a job's SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["process_alive", "process_start_ticks", "signal_group", "write_atomic"]


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
    """Write `text` so that a reader sees the old content or the new, never half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        with contextlib.suppress(OSError):
            os.fsync(handle.fileno())
    os.replace(tmp, path)
