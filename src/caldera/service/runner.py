"""`python -m caldera.service.runner EXIT_FILE RUNNER_FILE -- CMD…`: run one task, record how
it ended.

The service starts every task through this tiny runner, in a new session (its own process
group). The runner writes its pid and start time to RUNNER_FILE, runs CMD as its child in the
same group, and when the child ends writes the exit code to EXIT_FILE (atomically). A server
that was killed and restarted did not spawn these processes and cannot wait for them; the
files tell it what happened. SIGTERM to the group reaches CMD directly; the runner itself
only waits, so it can still record the exit code after the child's emergency checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from caldera.service.procs import process_start_ticks, write_atomic

__all__ = ["main"]


def _ignore(_signum: int, _frame: object) -> None:
    """A handler, not SIG_IGN: handlers reset to the default in the exec'd child."""


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: python -m caldera.service.runner EXIT RUNNER -- CMD...\n")
        return 2
    exit_file, runner_file, command = Path(argv[0]), Path(argv[1]), argv[3:]
    pid = os.getpid()
    write_atomic(runner_file, json.dumps({"pid": pid, "start_ticks": process_start_ticks(pid)}))
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        sys.stderr.write(f"caldera: cannot start {command[0]!r}: {error.strerror or error}\n")
        sys.stderr.flush()
        write_atomic(exit_file, json.dumps({"exit_code": 127}))
        return 127
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    write_atomic(exit_file, json.dumps({"exit_code": code}))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
