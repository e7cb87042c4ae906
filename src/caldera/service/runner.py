"""`python -I -m caldera.service.runner SPEC`: run one task, keep every process it starts in
hand, record how it ended.

The service starts every task through this runner, in a new session, with a clean
environment of its own (the job's variables are in SPEC, never in the runner's environment:
`LD_PRELOAD` or `PYTHONPATH` from a request must not reach a process running as the server's
user). SPEC is a JSON file the server wrote, readable by the server's user only:
`command`, `env`, `cwd`, `uid`/`gid`/`groups` (the job's OS account, or null), `cgroup` (a
folder to make, or null), `limit_cgroups` (folders the server made with the task's limits,
`caldera.service.cgroups`), `limits` (their description, for the log), `log`,
`log_max_bytes`, `log_keep`, `exit_file`, `runner_file`.

The runner:
1. becomes a child subreaper and writes RUNNER_FILE (its pid, start time, cgroup), so a
   restarted server can recognise it;
2. forks the task's first process, which joins the task's cgroups (tracking and limits),
   drops to the job's account (groups, gid, uid; umask 077), enters the working directory
   and executes the command, with stdout and stderr into a pipe the runner copies to the
   task log (`logfiles.RotatingLog`, bounded); a failure at any of these steps is one line
   in the log and exit code 127;
3. on SIGTERM sends SIGTERM to **every** process of the task (the cgroup's, else every
   descendant: `setsid` and double forks included); on SIGUSR1 kills them all;
4. when the first process exits, kills whatever of the task is left, waits until no process
   of it remains, and only then writes the exit code and what the kernel recorded in the
   limit cgroups (OOM kills, peak memory, refused forks) to EXIT_FILE (atomically) and exits. The
   server gives the task's GPUs back when the runner has exited, so a GPU is never handed on
   while a process of the task still runs.

Running as root, the runner stays root and the task runs as the job's account: the task can
neither signal the runner nor the server, nor write the runner's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from pathlib import Path
from typing import Any

from caldera.service import cgroups
from caldera.service.logfiles import RotatingLog
from caldera.service.procs import process_start_ticks, write_atomic
from caldera.service.proctree import (
    cgroup_empty,
    cgroup_kill,
    cgroup_pids,
    descendants,
    remove_cgroup,
    set_subreaper,
)

__all__ = ["main"]

_READ = 64 * 1024
_FAILED = 127


class _Flags:
    terminate = 0  # SIGTERMs received and not yet passed on
    kill = False


_flags = _Flags()


def _on_term(_signum: int, _frame: object) -> None:
    _flags.terminate += 1


def _on_kill(_signum: int, _frame: object) -> None:
    _flags.kill = True


def _wake(_signum: int, _frame: object) -> None:
    """SIGCHLD: nothing to do but wake the loop (through the wake-up fd)."""


def _start(spec: dict[str, Any], output: int) -> int:
    """Fork the task's first process; in the child: cgroup, account, directory, exec."""
    command: list[str] = spec["command"]
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never return from here
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.dup2(output, 1)
        os.dup2(output, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(3, 65536)
        step = "join its cgroup"
        try:
            if spec.get("cgroup"):
                with open(Path(spec["cgroup"]) / "cgroup.procs", "w") as procs:
                    procs.write("0")
            step = "join its limit cgroups"
            cgroups.join([Path(p) for p in spec.get("limit_cgroups") or ()])
            os.umask(0o077)
            if spec.get("uid") is not None:
                step = "drop to the job's account"
                os.setgroups(list(spec.get("groups") or [spec["gid"]]))
                os.setgid(int(spec["gid"]))
                os.setuid(int(spec["uid"]))
                if os.getuid() == 0 or os.geteuid() == 0:
                    raise PermissionError("still root")
            step = f"enter {spec['cwd']}"
            os.chdir(spec["cwd"])
            step = f"start {command[0]!r}"
            os.execvpe(command[0], command, spec["env"])
        except OSError as error:
            reason = error.strerror or str(error)
            os.write(2, f"caldera: cannot {step}: {reason}\n".encode(errors="replace"))
        except Exception as error:  # never let the child fall back into the runner
            os.write(2, f"caldera: cannot start the task: {error}\n".encode(errors="replace"))
    finally:
        os._exit(_FAILED)


class _Task:
    """The task's processes, as the runner sees them."""

    def __init__(self, cgroup: Path | None, limited: list[Path]) -> None:
        self.cgroup = cgroup
        self.limited = limited  # the limit cgroups (v1: one per hierarchy)
        self.me = os.getpid()

    def pids(self) -> list[int]:
        found = set(descendants(self.me)) | cgroups.pids_in(self.limited)
        if self.cgroup is not None:
            found.update(cgroup_pids(self.cgroup))
        return sorted(found)

    def signal_all(self, signum: signal.Signals) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def kill_all(self) -> None:
        if self.cgroup is not None:
            cgroup_kill(self.cgroup)
        cgroups.kill_all(self.limited)
        self.signal_all(signal.SIGKILL)

    def gone(self) -> bool:
        if self.cgroup is not None and not cgroup_empty(self.cgroup):
            return False
        return not descendants(self.me) and not cgroups.pids_in(self.limited)


def _reap() -> list[tuple[int, int]]:
    """Collect every child that ended: (pid, exit code as Popen reports it)."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, os.waitstatus_to_exitcode(status)))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -I -m caldera.service.runner SPEC\n")
        return 2
    spec: dict[str, Any] = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    os.umask(0o077)
    set_subreaper()
    cgroup = Path(spec["cgroup"]) if spec.get("cgroup") else None
    if cgroup is not None:
        try:
            cgroup.mkdir(exist_ok=True)
        except OSError:
            cgroup = None  # the subreaper still finds every descendant
            spec["cgroup"] = None
    pid = os.getpid()
    record = {
        "pid": pid,
        "start_ticks": process_start_ticks(pid),
        "cgroup": spec.get("cgroup"),
        "limit_cgroups": spec.get("limit_cgroups") or [],
    }
    write_atomic(Path(spec["runner_file"]), json.dumps(record))

    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGUSR1, _on_kill)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, _wake)

    log = RotatingLog(Path(spec["log"]), int(spec["log_max_bytes"]), int(spec["log_keep"]))
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    os.set_inheritable(out_w, True)
    child = _start(spec, out_w)
    os.close(out_w)
    os.set_blocking(out_r, False)
    limited = [Path(p) for p in spec.get("limit_cgroups") or ()]
    task = _Task(cgroup, limited)
    code: int | None = None
    output_open = True

    def copy_output() -> None:
        nonlocal output_open
        while output_open:
            try:
                data = os.read(out_r, _READ)
            except BlockingIOError:
                return
            if not data:
                output_open = False
                return
            log.write(data)

    while code is None:
        watched = [wake_r] + ([out_r] if output_open else [])
        with contextlib.suppress(InterruptedError):
            select.select(watched, [], [], 0.5)
        with contextlib.suppress(BlockingIOError):
            while os.read(wake_r, 4096):
                pass
        copy_output()
        if _flags.terminate:
            _flags.terminate = 0
            task.signal_all(signal.SIGTERM)
        if _flags.kill:
            _flags.kill = False
            task.kill_all()
        for ended, exit_code in _reap():
            if ended == child:
                code = exit_code

    # The first process has ended: nothing of the task may outlive it.
    while True:
        copy_output()
        _reap()
        if task.gone():
            break
        task.kill_all()
        select.select([wake_r] + ([out_r] if output_open else []), [], [], 0.05)
        with contextlib.suppress(BlockingIOError):
            while os.read(wake_r, 4096):
                pass
    _reap()
    copy_output()  # what the last processes wrote; a writer outside the task is not waited for
    used = cgroups.usage(limited)
    if used.oom_kills:
        limit = cgroups.format_bytes(used.memory_limit) if used.memory_limit else "?"
        log.write(
            f"caldera: out of memory (limit {limit}): the kernel killed "
            f"{used.oom_kills} process(es) of this task\n".encode()
        )
    if used.pids_refused:
        log.write(f"caldera: {used.pids_refused} fork(s) refused at the process limit\n".encode())
    log.close()
    cgroups.remove_all(limited)
    if cgroup is not None:
        remove_cgroup(cgroup)
    write_atomic(Path(spec["exit_file"]), json.dumps({"exit_code": code, **used.to_json()}))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
