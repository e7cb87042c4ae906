"""The process seam: start a task through the runner, learn how it ended, signal its group.

`ProcessLauncher` runs real processes. Each task runs in a new session (its own process
group) with stdout and stderr appended to a log file, never a pipe, so it outlives a killed
server. How it ended is read from the runner's exit file, which also works for processes a
restarted server adopted and never spawned.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from caldera.service.procs import process_alive, process_start_ticks, signal_group

__all__ = ["JobFiles", "Launch", "Launcher", "ProcessLauncher", "environment"]


class JobFiles:
    """Where a job's files live under the data dir: logs, checkpoints, control, run records."""

    def __init__(self, data_dir: Path, job_id: str) -> None:
        self.root = data_dir / "jobs" / job_id
        self.logs = self.root / "logs"
        self.checkpoint = self.root / "checkpoint"
        self.control = self.root / "control"
        self.run = self.root / "run"

    def make(self) -> None:
        for folder in (self.logs, self.checkpoint, self.control, self.run):
            folder.mkdir(parents=True, exist_ok=True)

    def log(self, rank: int) -> Path:
        return self.logs / f"task-{rank}.log"

    def exit_file(self, attempt: int, rank: int) -> Path:
        return self.run / f"a{attempt}-r{rank}.exit"

    def runner_file(self, attempt: int, rank: int) -> Path:
        return self.run / f"a{attempt}-r{rank}.runner"


@dataclass(frozen=True, slots=True)
class Launch:
    job: str
    rank: int
    attempt: int
    command: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    files: JobFiles


class Launcher(Protocol):
    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        """Start the task; return its process id and start time. Raises OSError."""
        ...

    def ended(
        self, files: JobFiles, attempt: int, rank: int, pid: int | None, ticks: int | None
    ) -> tuple[bool, int | None]:
        """(has it ended, its exit code or None when nobody saw it)."""
        ...

    def recorded(self, files: JobFiles, attempt: int, rank: int) -> tuple[int, int | None] | None:
        """The pid the runner recorded for a task whose spawn was not yet committed."""
        ...

    def signal(self, pid: int | None, ticks: int | None, signum: signal.Signals) -> bool: ...


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ProcessLauncher:
    """Real processes on this host."""

    def __init__(self) -> None:
        # Our own children, to reap them (an adopted process is reaped by init).
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        files = launch.files
        files.make()
        for stale in (
            files.exit_file(launch.attempt, launch.rank),
            files.runner_file(launch.attempt, launch.rank),
        ):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        argv = [
            sys.executable,
            "-m",
            "caldera.service.runner",
            str(files.exit_file(launch.attempt, launch.rank)),
            str(files.runner_file(launch.attempt, launch.rank)),
            "--",
            *launch.command,
        ]
        with open(files.log(launch.rank), "ab") as log:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=launch.cwd,
                env=launch.env,
                start_new_session=True,
                close_fds=True,
            )
        self.children[child.pid] = child
        return child.pid, process_start_ticks(child.pid)

    def ended(
        self, files: JobFiles, attempt: int, rank: int, pid: int | None, ticks: int | None
    ) -> tuple[bool, int | None]:
        exit_file = files.exit_file(attempt, rank)
        child = self.children.get(pid) if pid else None
        if child is not None:
            if child.poll() is None:
                return False, None
            del self.children[child.pid]
            return True, self._exit_code(exit_file)
        code = self._exit_code(exit_file)
        if code is not None:
            return True, code
        if process_alive(pid, ticks):
            return False, None
        # It may have written its record and exited between the two looks.
        return True, self._exit_code(exit_file)

    @staticmethod
    def _exit_code(path: Path) -> int | None:
        data = _read_json(path)
        if data is None:
            return None
        code = data.get("exit_code")
        return code if isinstance(code, int) else None

    def recorded(self, files: JobFiles, attempt: int, rank: int) -> tuple[int, int | None] | None:
        data = _read_json(files.runner_file(attempt, rank))
        if data is None or not isinstance(data.get("pid"), int):
            return None
        ticks = data.get("start_ticks")
        pid = data["pid"]
        assert isinstance(pid, int)
        return pid, ticks if isinstance(ticks, int) else None

    def signal(self, pid: int | None, ticks: int | None, signum: signal.Signals) -> bool:
        return signal_group(pid, ticks, signum)

    def reap(self) -> None:
        """Collect children that ended after their task was settled another way."""
        for pid, child in list(self.children.items()):
            if child.poll() is not None and not process_alive(pid, None):
                self.children.pop(pid, None)


def environment(
    base: dict[str, str], extra: dict[str, str], caldera: dict[str, str]
) -> dict[str, str]:
    """The task's environment: the server's, minus its API token, plus the request's, plus
    caldera's own variables (which the request cannot override)."""
    env = {k: v for k, v in base.items() if k not in ("CALDERA_TOKEN",)}
    env.update(extra)
    env.update(caldera)
    return env
