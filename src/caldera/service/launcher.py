"""The process seam: start a task through the runner, learn how it ended, stop all of it.

`ProcessLauncher` runs real processes. Each task runs in a new session under its own runner
(`caldera.service.runner`), which drops to the job's OS account, keeps every process of the
task in hand (cgroup v2 or subreaper) and copies its output to a bounded log; so a task
outlives a killed server. How it ended is read from the runner's exit file, which also works
for processes a restarted server adopted and never spawned. The runner exits, and the task
counts as ended, only once no process of the task is left.

Anything that goes wrong while starting a task (an unknown account, a bad environment, a
missing directory, a fork that fails) raises `SpawnError`, an OSError with a one-line reason:
that task fails, never the loop nor the other starts of the cycle.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from caldera.errors import ServiceError
from caldera.service import cgroups as limit_cgroups
from caldera.service.isolation import Account, Isolation
from caldera.service.procs import process_alive, process_start_ticks, write_atomic
from caldera.service.proctree import cgroup_empty, cgroup_kill, remove_cgroup

__all__ = [
    "JobFiles",
    "Launch",
    "Launcher",
    "ProcessLauncher",
    "SpawnError",
    "check_environment",
    "end_reason",
    "environment",
    "kill_recorded_tasks",
]

# What the runner itself runs with: nothing of the server's environment, nothing of the job's.
_RUNNER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


class SpawnError(ServiceError, OSError):
    """A task could not be started. The message is one line, for the job's `reason`."""


class JobFiles:
    """Where a job's files live under the data dir.

    `jobs/ID/` belongs to the server (0711: others may only pass through). Inside it `logs/`
    and `run/` (runner specs, records and exit files) are the server's alone (0700);
    `checkpoint/`, `control/` and `work/` (the default working directory) belong to the job's
    account (0700), so a job can write only there and no other account can look in.
    """

    def __init__(self, data_dir: Path, job_id: str) -> None:
        self.root = data_dir / "jobs" / job_id
        self.logs = self.root / "logs"
        self.checkpoint = self.root / "checkpoint"
        self.control = self.root / "control"
        self.work = self.root / "work"
        self.run = self.root / "run"

    def make(self, account: Account | None = None) -> None:
        """Create the folders with their owners and modes (`account`: the job's, when the
        server runs jobs as another account)."""
        for shared in (self.root.parent, self.root):
            shared.mkdir(mode=0o711, exist_ok=True)
            os.chmod(shared, 0o711)
        for private in (self.logs, self.run):
            private.mkdir(mode=0o700, exist_ok=True)
            os.chmod(private, 0o700)
        for owned in (self.checkpoint, self.control, self.work):
            owned.mkdir(mode=0o700, exist_ok=True)
            # The parent is the server's: the job cannot have swapped these for links.
            if account is not None:
                os.chown(owned, account.uid, account.gid, follow_symlinks=False)
            os.chmod(owned, 0o700, follow_symlinks=False)

    def log(self, rank: int) -> Path:
        return self.logs / f"task-{rank}.log"

    def exit_file(self, attempt: int, rank: int) -> Path:
        return self.run / f"a{attempt}-r{rank}.exit"

    def runner_file(self, attempt: int, rank: int) -> Path:
        return self.run / f"a{attempt}-r{rank}.runner"

    def spec_file(self, attempt: int, rank: int) -> Path:
        return self.run / f"a{attempt}-r{rank}.spec"

    def report(self, rank: int) -> Path:
        """Where the SDK in task `rank` writes its progress and checkpoints."""
        return self.control / f"rank-{rank}.json"


@dataclass(frozen=True, slots=True)
class Launch:
    job: str
    rank: int
    attempt: int
    command: tuple[str, ...]
    env: dict[str, str]  # the request's and caldera's variables (see `environment`)
    cwd: Path
    files: JobFiles
    user: str = ""  # the caldera user: whose OS account the task runs as
    queue: str = ""
    memory_mib: int = 0  # the job's memory request per task (0: none)
    millicores: int = 0  # the job's CPU request per task (0: none)


class Launcher(Protocol):
    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        """Start the task; return its runner's process id and start time. Raises OSError."""
        ...

    def ended(
        self, files: JobFiles, attempt: int, rank: int, pid: int | None, ticks: int | None
    ) -> tuple[bool, int | None]:
        """(has it ended, its exit code or None when nobody saw it)."""
        ...

    def recorded(self, files: JobFiles, attempt: int, rank: int) -> tuple[int, int | None] | None:
        """The pid the runner recorded for a task whose spawn was not yet committed."""
        ...

    def signal(self, pid: int | None, ticks: int | None, signum: signal.Signals) -> bool:
        """SIGTERM: every process of the task gets SIGTERM; SIGKILL: all are killed."""
        ...


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ProcessLauncher:
    """Real processes on this host, run as the accounts `isolation` says."""

    def __init__(self, isolation: Isolation | None = None) -> None:
        self.isolation = isolation if isolation is not None else Isolation(privileged=False)
        # Our own children, to reap them (an adopted runner is reaped by init).
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        try:
            return self._spawn(launch)
        except SpawnError:
            raise
        except LookupError as error:
            raise SpawnError(str(error.args[0] if error.args else error)) from None
        except OSError as error:
            where = f" ({error.filename})" if error.filename else ""
            raise SpawnError(f"{error.strerror or error}{where}") from None
        except Exception as error:  # whatever it is, it fails this task only
            raise SpawnError(f"{type(error).__name__}: {error}".splitlines()[0]) from None

    def _spawn(self, launch: Launch) -> tuple[int, int | None]:
        files = launch.files
        account = self.isolation.account(launch.user)
        env = check_environment(
            {**_defaults(account or self.isolation.server), **launch.env}, launch.command
        )
        files.make(account)
        attempt, rank = launch.attempt, launch.rank
        for stale in (files.exit_file(attempt, rank), files.runner_file(attempt, rank)):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        cgroup = self.isolation.cgroup_root
        name = f"{launch.job}-a{attempt}-r{rank}"
        limited: tuple[Path, ...] = ()
        limits = self.isolation.task_limits(launch.memory_mib, launch.millicores, launch.queue)
        if self.isolation.cgroups is not None:
            limited = self.isolation.cgroups.create(name, limits)
        spec = {
            "command": list(launch.command),
            "env": env,
            "cwd": str(launch.cwd),
            "uid": account.uid if account else None,
            "gid": account.gid if account else None,
            "groups": list(account.groups) if account else None,
            "cgroup": str(cgroup / name) if cgroup else None,
            "limit_cgroups": [str(folder) for folder in limited],
            "limits": limits.describe(),
            "log": str(files.log(rank)),
            "log_max_bytes": self.isolation.log_max_bytes,
            "log_keep": self.isolation.log_keep,
            "exit_file": str(files.exit_file(attempt, rank)),
            "runner_file": str(files.runner_file(attempt, rank)),
        }
        spec_file = files.spec_file(attempt, rank)
        write_atomic(spec_file, json.dumps(spec))
        argv = [sys.executable, "-I", "-m", "caldera.service.runner", str(spec_file)]
        # The runner's own complaints (it never should have any) go to the task's log.
        fd = os.open(files.log(rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                cwd=files.run,
                env=_RUNNER_ENV,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(fd)
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
        else:
            code = self._exit_code(exit_file)
            if code is not None:
                return True, code
            if process_alive(pid, ticks):
                return False, None
        # The runner has exited. It writes its exit file once nothing of the task is left;
        # without one it was killed itself: what it kept in its cgroup is killed here.
        code = self._exit_code(exit_file)
        if code is None and not self._cgroup_gone(files, attempt, rank):
            return False, None
        return True, code

    def _cgroup_gone(self, files: JobFiles, attempt: int, rank: int) -> bool:
        data = _read_json(files.runner_file(attempt, rank))
        limited = _limit_cgroups(data)
        if limited:  # what the runner left in its limit cgroups (v1: not in `cgroup`)
            if limit_cgroups.pids_in(limited):
                limit_cgroups.kill_all(limited)
                return False
            limit_cgroups.remove_all(limited)
        where = data.get("cgroup") if data else None
        if not isinstance(where, str):
            return True
        cgroup = Path(where)
        if cgroup_empty(cgroup):
            remove_cgroup(cgroup)
            return True
        cgroup_kill(cgroup)
        return False

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
        """Ask the task's runner: it passes SIGTERM to every process of the task, and kills
        them all on SIGUSR1 (SIGKILL would kill the runner and leave its task behind)."""
        if not process_alive(pid, ticks):
            return False
        assert pid is not None
        try:
            os.kill(pid, signal.SIGUSR1 if signum == signal.SIGKILL else signum)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def reap(self) -> None:
        """Collect children that ended after their task was settled another way."""
        for pid, child in list(self.children.items()):
            if child.poll() is not None and not process_alive(pid, None):
                self.children.pop(pid, None)


def _limit_cgroups(record: dict[str, object] | None) -> list[Path]:
    found = record.get("limit_cgroups") if record else None
    return [Path(p) for p in found if isinstance(p, str)] if isinstance(found, list) else []


def end_reason(files: JobFiles, attempt: int, rank: int) -> str | None:
    """Why a task ended, when its runner's exit file says more than an exit code: the kernel
    killed it at its memory limit (`out of memory (limit 128 MiB)`). None otherwise."""
    data = _read_json(files.exit_file(attempt, rank))
    kills = data.get("oom_kills") if data else None
    if not isinstance(kills, int) or kills <= 0 or data is None:
        return None
    limit = data.get("memory_limit")
    size = limit_cgroups.format_bytes(limit) if isinstance(limit, int) else "unknown"
    return f"out of memory (limit {size})"


def _defaults(account: Account) -> dict[str, str]:
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": account.home,
        "USER": account.name,
        "LOGNAME": account.name,
        "SHELL": "/bin/sh",
    }


def environment(extra: dict[str, str], caldera: dict[str, str]) -> dict[str, str]:
    """The task's variables: the request's `env`, then caldera's own (which the request cannot
    override). Nothing of the server's environment: the launcher adds only PATH, LANG, HOME,
    USER, LOGNAME and SHELL for the job's account, under these."""
    return {**extra, **caldera}


def check_environment(env: dict[str, str], command: tuple[str, ...]) -> dict[str, str]:
    """What `execve` would refuse, as one line: a name that is empty or holds `=` or NUL, a
    value or argument that holds NUL."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise SpawnError(f"env: invalid variable name {name!r}")
        if "\0" in value:
            raise SpawnError(f"env: the value of {name} holds a NUL character")
    if not command or not command[0]:
        raise SpawnError("command: the program name is empty")
    for index, argument in enumerate(command):
        if "\0" in argument:
            raise SpawnError(f"command: argument {index} holds a NUL character")
    return env


def kill_recorded_tasks(data_dir: Path, wait: float = 0.0) -> int:
    """Kill every task whose runner record is under `data_dir` (tasks outlive their server by
    design; a benchmark or a test that is done with a server uses this). Returns how many
    runners were told. `wait`: seconds to wait for the told runners to be gone (they write
    their last status as they go, so a caller about to remove `data_dir` must wait)."""
    told: list[tuple[int, int | None]] = []
    limited: list[Path] = []
    for record in data_dir.glob("jobs/*/run/*.runner"):
        data = _read_json(record)
        if data is None:
            continue
        if isinstance(data.get("cgroup"), str):
            cgroup_kill(Path(str(data["cgroup"])))
        limited.extend(_limit_cgroups(data))
        limit_cgroups.kill_all(_limit_cgroups(data))
        pid, ticks = data.get("pid"), data.get("start_ticks")
        start = ticks if isinstance(ticks, int) else None
        if isinstance(pid, int) and process_alive(pid, start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGUSR1)
                told.append((pid, start))
    deadline = time.monotonic() + wait
    alive = told
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [(pid, start) for pid, start in alive if process_alive(pid, start)]
    for folder in limited:  # emptied above; its runner may be killed before it removes it
        with contextlib.suppress(OSError):
            folder.rmdir()
    return len(told)
