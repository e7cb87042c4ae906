"""Who a job runs as, how its processes are tracked, how big its logs may grow (DESIGN §8;
docs/service.md "Security model").

The config file's `isolation` section maps caldera users to OS accounts:

```yaml
isolation:
  users: {alice: alice, bob: bob}    # caldera user -> OS account
  sandbox_user: caldera-jobs         # every other caldera user's jobs (made by the operator)
  tracking: auto                     # auto | cgroup | subreaper
  cgroups: auto                      # per-task limits: auto | v1 | v2 | off
  task_memory: 8Gi                   # a task's memory when its job asks for none (default: none)
  queue_memory: {dev: 2Gi}           # the same, per queue (before task_memory)
  task_pids: 4096                    # processes and threads per task
logs: {max_bytes: 64Mi, keep: 2}     # per task: the log and 2 rotated files
```

Per-task limits (`caldera.service.cgroups`): memory from the job's `memory` request, else its
queue's `queue_memory`, else `task_memory`; processes from `task_pids`; CPU from the job's
`cpu` request (a quota). Where no cgroup controller can be used the start-up line says so and
none of them is enforced.

A server running as root never runs a job as root (nor as any account with uid 0): every
caldera user named by a token must resolve to an unprivileged account, or the server refuses
to start. A server that is not root cannot change user: its jobs share its account (the start-
up line says so), and `users`/`sandbox_user` naming another account are an error.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from caldera.errors import ConfigError
from caldera.model import parse_memory_mib
from caldera.service.cgroups import Cgroups, TaskLimits

__all__ = [
    "Account",
    "Isolation",
    "IsolationModel",
    "LogsModel",
    "build_isolation",
]


class IsolationModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    users: dict[str, str] = Field(default_factory=dict)
    sandbox_user: str | None = Field(default=None, min_length=1)
    tracking: Literal["auto", "cgroup", "subreaper"] = "auto"
    cgroups: Literal["auto", "v1", "v2", "off"] = "auto"
    task_memory: int | None = Field(default=None, ge=4 * 1024 * 1024)
    queue_memory: dict[str, int] = Field(default_factory=dict)
    task_pids: int | None = Field(default=4096, ge=8)

    @field_validator("task_memory", mode="before")
    @classmethod
    def _memory(cls, value: object) -> object:
        return _bytes(value)

    @field_validator("queue_memory", mode="before")
    @classmethod
    def _queues(cls, value: object) -> object:
        if isinstance(value, dict):
            return {name: _bytes(size) for name, size in value.items()}
        return value

    @field_validator("queue_memory")
    @classmethod
    def _queue_floor(cls, value: dict[str, int]) -> dict[str, int]:
        for name, size in value.items():
            if size < 4 * 1024 * 1024:
                raise ValueError(f"{name}: at least 4Mi")
        return value


def _bytes(value: object) -> object:
    """`"8Gi"` → bytes; a bare number is MiB, as in a job's `memory` request."""
    if isinstance(value, str | int | float):
        try:
            return parse_memory_mib(value) * 1024 * 1024
        except ValueError as error:
            raise ValueError(str(error)) from None
    return value


class LogsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=4096)
    keep: int = Field(default=2, ge=0, le=100)

    @field_validator("max_bytes", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        if isinstance(value, str):  # "64Mi", "1Gi": the memory units, in bytes
            return parse_memory_mib(value) * 1024 * 1024
        return value


@dataclass(frozen=True, slots=True)
class Account:
    """An OS account jobs run as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> Account:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise LookupError(f"there is no OS account {name!r}") from None
        groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)

    @classmethod
    def current(cls) -> Account:
        uid = os.geteuid()
        try:
            entry = pwd.getpwuid(uid)
            name, home = entry.pw_name, entry.pw_dir
        except KeyError:
            name, home = str(uid), os.environ.get("HOME", "/")
        return cls(name, uid, os.getegid(), tuple(os.getgroups()), home)


@dataclass
class Isolation:
    """The accounts and the process tracking of this server's jobs."""

    privileged: bool  # the server is root and runs each job as its account
    accounts: Mapping[str, Account] = field(default_factory=dict)
    sandbox: Account | None = None
    tracking: Literal["cgroup", "subreaper"] = "subreaper"
    cgroup_root: Path | None = None
    tracking_note: str = ""
    log_max_bytes: int = LogsModel().max_bytes
    log_keep: int = LogsModel().keep
    server: Account = field(default_factory=Account.current)
    cgroups: Cgroups | None = None  # None: no per-task limit is enforced
    cgroups_note: str = ""  # why there are none
    task_memory: int | None = None
    queue_memory: Mapping[str, int] = field(default_factory=dict)
    task_pids: int | None = IsolationModel().task_pids

    def task_limits(self, memory_mib: int, millicores: int, queue: str) -> TaskLimits:
        """One task's limits: its job's memory request, else its queue's default, else the
        server's; its job's CPU request (no request: no quota); the process limit."""
        memory = memory_mib * 1024 * 1024 if memory_mib > 0 else None
        if memory is None:
            memory = self.queue_memory.get(queue, self.task_memory)
        return TaskLimits(memory, self.task_pids, millicores if millicores > 0 else None)

    def account(self, user: str) -> Account | None:
        """The account `user`'s jobs run as; None: this server's own (it is not root)."""
        if not self.privileged:
            return None
        found = self.accounts.get(user) or self.sandbox
        if found is None:
            raise LookupError(f"no OS account for caldera user {user!r}")
        return found

    def workdir_problem(self, user: str, workdir: str) -> str | None:
        """Why `user`'s jobs could not enter `workdir`, as one line (None: they can). Asked
        at submission, so that a folder the job's account cannot reach (root's home, another
        user's 0700 folder) is refused then, not found out by a task that exits with 127."""
        try:
            account = self.account(user) or self.server
        except LookupError:
            return None  # the launcher fails the task with its own reason
        if account.uid == 0:
            return None
        real = Path(os.path.realpath(workdir))
        for folder in (*reversed(real.parents), real):
            try:
                info = os.stat(folder)
            except OSError as error:
                return f"workdir {workdir}: {folder}: {error.strerror or error}"
            if folder == real and not stat.S_ISDIR(info.st_mode):
                return f"workdir {workdir} is not a folder"
            if info.st_uid == account.uid:
                bit = stat.S_IXUSR
            elif info.st_gid == account.gid or info.st_gid in account.groups:
                bit = stat.S_IXGRP
            else:
                bit = stat.S_IXOTH
            if not info.st_mode & bit:
                return (
                    f"workdir {workdir}: the jobs' account {account.name} cannot enter "
                    f"{folder} (mode {stat.S_IMODE(info.st_mode):04o}); submit from a folder "
                    "it can reach"
                )
        return None

    def describe_limits(self) -> str:
        if self.cgroups is None:
            return f"NO per-task memory, process or CPU limit is enforced ({self.cgroups_note})"
        return f"tasks' memory, processes and CPU limited by {self.cgroups.describe()}"

    def describe(self) -> str:
        """The start-up line: who jobs run as and how their processes are tracked."""
        tracked = f"processes tracked by {self.tracking_note}; {self.describe_limits()}"
        if self.privileged:
            who = ", ".join(f"{u}→{a.name}" for u, a in sorted(self.accounts.items()))
            if self.sandbox is not None:
                who = f"{who}, others→{self.sandbox.name}" if who else self.sandbox.name
            return f"jobs run as {who} (never as root); {tracked}"
        return (
            f"jobs run as this server's own user {self.server.name} (uid {self.server.uid}): "
            "they can read its files and signal it; only root can run jobs as other accounts. "
            f"Jobs still get a clean environment and private 0700 folders; {tracked}"
        )


def build_isolation(
    model: IsolationModel,
    logs: LogsModel,
    users: Iterable[str],
    cgroup_root: tuple[Path | None, str],
    cgroups: tuple[Cgroups | None, str] = (None, "not looked for"),
) -> Isolation:
    """Resolve the accounts for the tokens' `users`. Raises ConfigError (one line).
    `cgroups`: what limits tasks here (`cgroups.detect`), or None and why."""
    privileged = os.geteuid() == 0
    server = Account.current()
    names = dict(model.users)
    if model.sandbox_user is not None:
        names["\0sandbox"] = model.sandbox_user
    resolved: dict[str, Account] = {}
    for user, name in names.items():
        where = "isolation.sandbox_user" if user == "\0sandbox" else f"isolation.users.{user}"
        try:
            account = Account.lookup(name)
        except LookupError as error:
            raise ConfigError(f"{where}: {error}") from None
        if account.uid == 0:
            raise ConfigError(f"{where}: {name!r} is root; jobs never run as root")
        if not privileged and account.uid != server.uid:
            raise ConfigError(
                f"{where}: only a server running as root can run jobs as {name!r} "
                f"(this one runs as {server.name})"
            )
        resolved[user] = account
    sandbox = resolved.pop("\0sandbox", None)
    if privileged and sandbox is None:
        missing = sorted({u for u in users if u not in resolved})
        if missing:
            raise ConfigError(
                "isolation: caldera serve runs as root and jobs never do: set "
                "isolation.sandbox_user (one account for all jobs) or map "
                f"{', '.join(repr(u) for u in missing)} in isolation.users"
            )
    root, note = cgroup_root
    tracking: Literal["cgroup", "subreaper"] = "cgroup" if root is not None else "subreaper"
    if model.tracking == "subreaper":
        root, tracking, note = None, "subreaper", "the runner as subreaper (tracking: subreaper)"
    elif model.tracking == "cgroup" and root is None:
        raise ConfigError(f"isolation.tracking: cgroup is not available here: {note}")
    elif root is None:
        note = f"the runner as subreaper ({note})"
    return Isolation(
        privileged=privileged,
        accounts=resolved,
        sandbox=sandbox,
        tracking=tracking,
        cgroup_root=root,
        tracking_note=note,
        log_max_bytes=logs.max_bytes,
        log_keep=logs.keep,
        server=server,
        cgroups=cgroups[0],
        cgroups_note=cgroups[1],
        task_memory=model.task_memory,
        queue_memory=dict(model.queue_memory),
        task_pids=model.task_pids,
    )
