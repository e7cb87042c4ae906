"""Preemption support for training code run by caldera.

    from caldera.sdk import preemption

    step = preemption.resume_step() or 0          # or read your own checkpoint
    while step < total:
        train_one_step()
        step += 1
        if step % 100 == 0 or preemption.should_stop():
            save(preemption.checkpoint_dir(), step)
            preemption.report_checkpoint(step)     # work up to here is safe
        preemption.report_progress(step / total)   # defends the job (effective weight)
        if preemption.should_stop():
            break                                  # exit: the job is requeued and resumes

Importing this module installs a SIGTERM handler (in the main thread) that only sets a flag,
so the training loop decides when to stop. When caldera evicts the job it sends SIGTERM to
every task, waits the grace period (`grace_period()` seconds; `deadline()` is when), then
SIGKILLs what is left.

The channel to the service is a status file per task in the job's control folder
(`CALDERA_CONTROL_DIR/rank-N.json`, written atomically); the service reads it on its
polling loop. A file works while the server is restarting and needs no token in the job.
Outside caldera (no CALDERA_CONTROL_DIR) the reports do nothing, so the same code runs
anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = [
    "checkpoint_dir",
    "deadline",
    "grace_period",
    "install",
    "report_checkpoint",
    "report_progress",
    "resume_step",
    "should_stop",
    "stop_requested_at",
]

_stop = threading.Event()
_requested_at: float | None = None
_state: dict[str, Any] = {}
_lock = threading.Lock()
_written = [0.0]  # monotonic time of the last progress write


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    global _requested_at
    if _requested_at is None:
        _requested_at = time.time()
    _stop.set()


def install() -> bool:
    """Install the SIGTERM handler; False outside the main thread (call it from there)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def should_stop() -> bool:
    """True once caldera asked this job to give way (SIGTERM received)."""
    return _stop.is_set()


def stop_requested_at() -> float | None:
    return _requested_at


def grace_period() -> float:
    """Seconds between SIGTERM and SIGKILL on this service."""
    try:
        return float(os.environ.get("CALDERA_GRACE_PERIOD", "120"))
    except ValueError:
        return 120.0


def deadline() -> float | None:
    """Unix time by which the process must have exited, once asked to stop."""
    return None if _requested_at is None else _requested_at + grace_period()


def checkpoint_dir() -> Path:
    """The job's persistent checkpoint folder (the same across requeues)."""
    return Path(os.environ.get("CALDERA_CHECKPOINT_DIR", "checkpoints"))


def resume_step() -> int | None:
    """The step of the last checkpoint this job reported, if it is resuming."""
    value = os.environ.get("CALDERA_RESUME_STEP")
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _status_file() -> Path | None:
    folder = os.environ.get("CALDERA_CONTROL_DIR")
    if not folder:
        return None
    return Path(folder) / f"rank-{os.environ.get('RANK', '0')}.json"


def _write() -> None:
    path = _status_file()
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_state), encoding="utf-8")
    os.replace(tmp, path)


def report_checkpoint(step: int) -> None:
    """Tell caldera a checkpoint for `step` is safely written: work up to now is not lost."""
    with _lock:
        _state["checkpoint"] = {"step": int(step), "time": time.time()}
        _write()


def report_progress(fraction: float) -> None:
    """Tell caldera how far the job is (0..1); nearly finished jobs are defended."""
    value = min(max(float(fraction), 0.0), 1.0)
    now = time.monotonic()
    with _lock:
        before = _state.get("progress")
        # Training loops call this every step: write on a 1 % change or once a second.
        if before == value or (
            before is not None and abs(value - before) < 0.01 and now - _written[0] < 1.0
        ):
            return
        _state["progress"] = value
        _written[0] = now
        _write()


install()
