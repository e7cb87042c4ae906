"""Finding and killing every process of a task: a cgroup v2 where the host lets the server make
one, otherwise the runner as a child subreaper. Standard library only: the runner imports it.

- **cgroup**: each task gets `CGROUP_ROOT/JOB-aATTEMPT-rRANK`; the task's first process joins it
  before it runs the command, and everything it starts stays inside (a process cannot leave a
  cgroup it does not own). `cgroup.procs` lists them all; `cgroup.kill` kills them all at
  once, forks in flight included.
- **subreaper**: the runner calls `prctl(PR_SET_CHILD_SUBREAPER)`, so a process whose parent
  dies (a double fork, a `setsid` daemon) is re-parented to the runner instead of init and
  stays its descendant. The runner finds them by walking `/proc` parent links and kills them
  until it has no child left.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import time
from pathlib import Path

__all__ = [
    "cgroup_empty",
    "cgroup_kill",
    "cgroup_pids",
    "descendants",
    "find_cgroup_root",
    "remove_cgroup",
    "set_subreaper",
]

_PR_SET_CHILD_SUBREAPER = 36


def set_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants. False if the kernel refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, list[int]]:
    """Every process's children, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        with contextlib.suppress(IndexError, ValueError):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), found through /proc."""
    children = _parents()
    found: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


# -- cgroup v2 -------------------------------------------------------------------------------


def _cgroup2_mount() -> Path | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def _own_cgroup() -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


def find_cgroup_root(name: str = "caldera-tasks") -> tuple[Path | None, str]:
    """A cgroup v2 folder under this process's own cgroup where task cgroups can be made and
    killed, or None and the reason why not (for the start-up line)."""
    mount = _cgroup2_mount()
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted"
    own = _own_cgroup()
    if own is None:
        return None, "this process is in no cgroup v2"
    parent = mount / own.lstrip("/")
    root = parent / name
    probe = root / f"probe-{os.getpid()}"
    try:
        root.mkdir(exist_ok=True)
        probe.mkdir(exist_ok=True)
    except OSError as error:
        return None, f"cannot create a cgroup under {parent}: {error.strerror}"
    try:
        if not (probe / "cgroup.kill").exists():
            return None, "the kernel has no cgroup.kill (Linux 5.14 or later needed)"
        # Moving a process needs write access to the common ancestor's cgroup.procs.
        if not os.access(parent / "cgroup.procs", os.W_OK):
            return None, f"cannot move processes out of {parent}"
        return root, f"cgroup v2 at {root}"
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def cgroup_pids(cgroup: Path) -> list[int]:
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(pid) for pid in text.split()]


def cgroup_empty(cgroup: Path) -> bool:
    try:
        events = (cgroup / "cgroup.events").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return not cgroup_pids(cgroup)
    return "populated 0" in events


def cgroup_kill(cgroup: Path) -> None:
    """SIGKILL every process in the cgroup (and its children cgroups)."""
    try:
        (cgroup / "cgroup.kill").write_text("1")
    except FileNotFoundError:
        return
    except OSError:  # no cgroup.kill: one by one until none is left
        for _ in range(100):
            pids = cgroup_pids(cgroup)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)


def remove_cgroup(cgroup: Path) -> None:
    """Remove an emptied task cgroup (waits briefly for the kernel to see it empty)."""
    for _ in range(100):
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                return
            time.sleep(0.01)
