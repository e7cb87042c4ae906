"""Per-task resource limits through cgroups: memory, processes and CPU (docs/service.md
"Security model"). Standard library only: the runner imports it.

One seam, `Cgroups`, with two implementations behind it, chosen at start by `detect`:

- **v2** (`CgroupsV2`): the task's folder under the server's own `caldera-tasks` cgroup (the
  same folder that tracks the task's processes), with `memory.max`, `memory.swap.max`,
  `pids.max`, `cpu.max` and `cpu.weight`. The server enables the controllers it needs in its
  own subtree (`cgroup.subtree_control`).
- **v1** (`CgroupsV1`): one folder per hierarchy, `caldera/TASK` under the mount of each of
  `memory`, `pids` and `cpu` (Slurm's convention: a subtree of the server's own at the top of
  each hierarchy), with `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes` (where swap
  is accounted), `pids.max`, `cpu.cfs_quota_us` and `cpu.shares`.

**CPU: a quota, with a weight beside it.** A task may use at most the CPUs it asked for
(`cpu: 2` → 200 ms of CPU every 100 ms period). The scheduler places tasks by their requests,
so a request is a reservation: a task that spins past it takes CPU that was promised to a
neighbour (and to the server's own loop), and a weight alone would let it do so whenever the
host is not saturated. A quota makes a task's speed depend on what it asked for, not on who
runs next to it, as Slurm's core confinement does. The weight (proportional to the request)
only divides the CPU between tasks when the host is saturated by tasks that all stay under
their quotas. A task that asks for no CPU has no quota and the default weight.

The server creates a task's folders and writes its limits before the task's first process
exists; that process joins them (`join`) before it drops to the job's account and executes
the command, so nothing of the task ever runs unlimited. After the task, `usage` reads what
the kernel recorded (OOM kills, peak memory, refused forks) and the runner writes it into the
task's exit file; the launcher turns an OOM kill into the job's reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

__all__ = [
    "CONTROLLERS",
    "Cgroups",
    "CgroupsV1",
    "CgroupsV2",
    "TaskLimits",
    "TaskUsage",
    "detect",
    "format_bytes",
    "join",
    "kill_all",
    "pids_in",
    "remove_all",
    "usage",
]

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000  # the CFS period the quota is a share of (the kernel's default)
_V1_SHARES = 1024  # cpu.shares of one CPU (the kernel's default for a cgroup)
_V2_WEIGHT = 100  # cpu.weight of one CPU (the kernel's default)


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """What one task may use; None: no limit of that kind."""

    memory_bytes: int | None = None
    pids: int | None = None
    millicores: int | None = None

    def describe(self) -> str:
        parts = []
        if self.memory_bytes is not None:
            parts.append(f"memory {format_bytes(self.memory_bytes)}")
        if self.pids is not None:
            parts.append(f"{self.pids} processes")
        if self.millicores is not None:
            parts.append(f"{self.millicores / 1000:g} CPU")
        return ", ".join(parts) or "no limits"


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """What the kernel recorded for a task's cgroups (None: not known here)."""

    oom_kills: int = 0
    memory_limit: int | None = None
    memory_peak: int | None = None
    pids_refused: int = 0  # forks refused at the process limit

    def to_json(self) -> dict[str, int | None]:
        return {
            "oom_kills": self.oom_kills,
            "memory_limit": self.memory_limit,
            "memory_peak": self.memory_peak,
            "pids_refused": self.pids_refused,
        }


def format_bytes(size: int) -> str:
    """`134217728` → `128 MiB` (the unit a request was most likely written in)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size} B"


class Cgroups(Protocol):
    """Making a task's cgroups with its limits. `controllers`: which of memory, pids and cpu
    this host lets the server limit."""

    version: Literal[1, 2]
    controllers: tuple[str, ...]

    def create(self, name: str, limits: TaskLimits) -> tuple[Path, ...]:
        """Make the task's folders and write `limits`; return the folders its first process
        joins. Raises OSError."""
        ...

    def describe(self) -> str:
        """The start-up line's part: what is limited, where."""
        ...


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def _keyed(path: Path, key: str) -> int | None:
    """`key N` from a flat keyed file (memory.events, memory.oom_control, pids.events)."""
    text = _read(path)
    if text is None:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _number(path: Path) -> int | None:
    text = _read(path)
    if text is None or not text.strip().isdigit():
        return None
    return int(text)


class CgroupsV2:
    """Task cgroups under `root` (the server's `caldera-tasks`) on the unified hierarchy."""

    version: Literal[1, 2] = 2

    def __init__(self, root: Path, controllers: Iterable[str]) -> None:
        self.root = root
        self.controllers = tuple(c for c in CONTROLLERS if c in set(controllers))

    def create(self, name: str, limits: TaskLimits) -> tuple[Path, ...]:
        folder = self.root / name
        folder.mkdir(exist_ok=True)
        if limits.memory_bytes is not None and "memory" in self.controllers:
            _write(folder / "memory.max", str(limits.memory_bytes))
            if (folder / "memory.swap.max").exists():
                _write(folder / "memory.swap.max", "0")
        if limits.pids is not None and "pids" in self.controllers:
            _write(folder / "pids.max", str(limits.pids))
        if limits.millicores is not None and "cpu" in self.controllers:
            quota = max(1000, limits.millicores * CPU_PERIOD_US // 1000)
            _write(folder / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            weight = min(10_000, max(1, limits.millicores * _V2_WEIGHT // 1000))
            _write(folder / "cpu.weight", str(weight))
        return (folder,)

    def describe(self) -> str:
        return f"cgroup v2 at {self.root} ({', '.join(self.controllers)})"

    @classmethod
    def enable(cls, root: Path) -> tuple[CgroupsV2 | None, str]:
        """Enable memory, pids and cpu for the task cgroups under `root`: in `root`'s parent
        (the server's own cgroup) if they are not offered to `root` yet, then in `root`.
        None and why when none of them can be."""
        offered = set((_read(root / "cgroup.controllers") or "").split())
        missing = [c for c in CONTROLLERS if c not in offered]
        if missing:
            with contextlib.suppress(OSError):  # refused when the parent holds processes
                _write(root.parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
            offered = set((_read(root / "cgroup.controllers") or "").split())
        wanted = [c for c in CONTROLLERS if c in offered]
        enabled: list[str] = []
        for controller in wanted:
            try:
                _write(root / "cgroup.subtree_control", f"+{controller}")
            except OSError:
                continue
            enabled.append(controller)
        if not enabled:
            parent = set((_read(root.parent / "cgroup.controllers") or "").split())
            why = "they cannot be enabled" if parent & set(CONTROLLERS) else "it offers none"
            return None, f"cgroup v2 has no memory, pids or cpu controller for {root} ({why})"
        return cls(root, enabled), ""


class CgroupsV1:
    """Task cgroups under `caldera/` of each v1 hierarchy: `mounts` maps a controller to its
    hierarchy's mount point (co-mounted controllers share one)."""

    version: Literal[1, 2] = 1

    def __init__(self, mounts: dict[str, Path], parent: str = "caldera") -> None:
        self.mounts = {c: mounts[c] for c in CONTROLLERS if c in mounts}
        self.controllers = tuple(self.mounts)
        self.parent = parent

    def folder(self, controller: str, name: str) -> Path:
        return self.mounts[controller] / self.parent / name

    def create(self, name: str, limits: TaskLimits) -> tuple[Path, ...]:
        folders: dict[Path, None] = {}
        for controller in self.controllers:
            folder = self.folder(controller, name)
            folder.mkdir(parents=True, exist_ok=True)
            folders[folder] = None
        if limits.memory_bytes is not None and "memory" in self.mounts:
            folder = self.folder("memory", name)
            _write(folder / "memory.limit_in_bytes", str(limits.memory_bytes))
            if (folder / "memory.memsw.limit_in_bytes").exists():  # no swapping past it
                _write(folder / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        if limits.pids is not None and "pids" in self.mounts:
            _write(self.folder("pids", name) / "pids.max", str(limits.pids))
        if limits.millicores is not None and "cpu" in self.mounts:
            folder = self.folder("cpu", name)
            quota = max(1000, limits.millicores * CPU_PERIOD_US // 1000)
            _write(folder / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(folder / "cpu.cfs_quota_us", str(quota))
            _write(folder / "cpu.shares", str(max(2, limits.millicores * _V1_SHARES // 1000)))
        return tuple(folders)

    def describe(self) -> str:
        where = ", ".join(f"{c} at {self.mounts[c] / self.parent}" for c in self.controllers)
        return f"cgroup v1 ({where})"

    @classmethod
    def find(cls, mountinfo: str | None = None) -> tuple[CgroupsV1 | None, str]:
        """The v1 hierarchies of memory, pids and cpu this process may make folders in."""
        mounts: dict[str, Path] = {}
        for point, options in _v1_mounts(mountinfo):
            for controller in CONTROLLERS:
                if controller in options and controller not in mounts:
                    mounts[controller] = point
        if not mounts:
            return None, "no cgroup v1 hierarchy of memory, pids or cpu is mounted"
        usable: dict[str, Path] = {}
        refused = ""
        for controller, point in mounts.items():
            parent = point / "caldera"
            try:
                parent.mkdir(exist_ok=True)
                probe = parent / f"probe-{os.getpid()}"
                probe.mkdir(exist_ok=True)
                probe.rmdir()
            except OSError as error:
                refused = f"cannot create a cgroup under {point}: {error.strerror}"
                continue
            usable[controller] = point
        if not usable:
            return None, refused
        return cls(usable), ""


def _v1_mounts(mountinfo: str | None) -> list[tuple[Path, set[str]]]:
    """(mount point, super options) of every cgroup v1 mount."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = right.split()
        if len(fields) >= 3 and fields[0] == "cgroup":
            found.append((Path(left.split()[4]), set(fields[2].split(","))))
    return found


def detect(
    mode: Literal["auto", "v1", "v2", "off"], v2_root: Path | None
) -> tuple[Cgroups | None, str]:
    """The cgroups that limit tasks here, or None and why (the start-up line says it once).
    `v2_root`: the server's task-tracking folder on the unified hierarchy, if it has one.
    `auto` prefers v2 where it offers a controller, then v1."""
    if mode == "off":
        return None, "isolation.cgroups is off"
    reasons = []
    if mode in ("auto", "v2"):
        if v2_root is None:
            reasons.append("no cgroup v2 folder for tasks")
        else:
            v2, why = CgroupsV2.enable(v2_root)
            if v2 is not None:
                return v2, ""
            reasons.append(why)
    if mode in ("auto", "v1"):
        v1, why = CgroupsV1.find()
        if v1 is not None:
            return v1, ""
        reasons.append(why)
    return None, "; ".join(reasons)


# -- what the runner does with a task's folders ------------------------------------------------


def join(folders: Sequence[Path]) -> None:
    """Move this process into each of the task's folders (before it executes the task)."""
    me = str(os.getpid())
    for folder in folders:
        _write(folder / "cgroup.procs", me)


def pids_in(folders: Sequence[Path]) -> set[int]:
    found: set[int] = set()
    for folder in folders:
        text = _read(folder / "cgroup.procs") or ""
        found.update(int(pid) for pid in text.split() if pid.isdigit())
    return found


def kill_all(folders: Sequence[Path]) -> None:
    """SIGKILL every process in the folders: `cgroup.kill` on v2, else one by one until none
    is left (a fork bomb is bounded by its pids.max, so this ends)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            if (folder / "cgroup.kill").exists():
                _write(folder / "cgroup.kill", "1")
    for _ in range(200):
        pids = pids_in(folders)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def usage(folders: Sequence[Path]) -> TaskUsage:
    """What the kernel recorded in the task's folders, v1 or v2 (told apart by their files)."""
    oom, limit, peak, refused = 0, None, None, 0
    for folder in folders:
        if (folder / "memory.events").exists():  # v2
            oom += _keyed(folder / "memory.events", "oom_kill") or 0
            text = (_read(folder / "memory.max") or "").strip()
            limit = int(text) if text.isdigit() else limit
            peak = _number(folder / "memory.peak") or peak
        elif (folder / "memory.oom_control").exists():  # v1
            oom += _keyed(folder / "memory.oom_control", "oom_kill") or 0
            value = _number(folder / "memory.limit_in_bytes")
            limit = value if value is not None and value < 1 << 62 else limit
            peak = _number(folder / "memory.max_usage_in_bytes") or peak
        if (folder / "pids.events").exists():
            refused += _keyed(folder / "pids.events", "max") or 0
    return TaskUsage(oom, limit, peak, refused)


def remove_all(folders: Sequence[Path]) -> None:
    """Remove the task's emptied folders (the kernel may need a moment to see them empty)."""
    for folder in folders:
        for _ in range(100):
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as error:
                if error.errno != errno.EBUSY:
                    break
                time.sleep(0.01)
