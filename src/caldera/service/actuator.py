"""The service's effects (`caldera.runtime.Effects`): what the kernel's decisions do to
processes on this host, kept as data until the database has them.

The kernel changes jobs in memory and calls these effects; they only record: rows to write,
events, waiting modes, and typed intents (`Spawn`, `Signal`). `flush` commits the rows and
events in one transaction, then carries the signals out; spawns wait for the runtime's loop,
outside its lock (a fork is slow and a submission must not wait for it). So nothing reaches a
process before the database says why, and a reader can print what is about to happen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from signal import SIGTERM, Signals
from typing import Any

from caldera.core import Evict, Nomination, PolicyConfig, Room, TaskPlacement, Throttle
from caldera.model import GPU_MILLI, Node
from caldera.ports import free_port
from caldera.runtime import EventKind
from caldera.service.jobs import LiveJob, TaskRun
from caldera.service.launcher import JobFiles, Launch, Launcher, environment
from caldera.service.store import Store

__all__ = ["Actuator", "Intent", "Signal", "Spawn"]

log = logging.getLogger("caldera.service")


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start one task's process group (its row is committed first)."""

    job: LiveJob
    task: TaskRun


@dataclass(frozen=True, slots=True)
class Signal:
    """Send `signum` to a task's process group (SIGTERM: leave; SIGKILL: the grace ran out)."""

    task: TaskRun
    signum: Signals


Intent = Spawn | Signal


class Actuator:
    """Effects for the service's kernel, and the one place that writes and signals."""

    def __init__(
        self,
        room: Room,
        nodes: tuple[Node, ...],
        policy: PolicyConfig,
        store: Store,
        launcher: Launcher,
        data_dir: Path,
        jobs: Mapping[str, LiveJob],
        visible: Callable[[tuple[int, ...]], str],
    ) -> None:
        self.room = room
        self.nodes = nodes
        self.policy = policy
        self.store = store
        self.launcher = launcher
        self.data_dir = data_dir
        self.jobs = jobs  # the live jobs (the kernel's), to name a preemptor's type
        self.visible = visible  # devices → CUDA_VISIBLE_DEVICES
        self.holding: dict[str, LiveJob] = {}  # jobs with tasks: the few a poll looks at
        self.dirty: dict[str, LiveJob] = {}
        self.events: list[dict[str, Any]] = []
        self.throttle_writes: list[tuple[str, Throttle | None]] = []
        self.signals: list[Signal] = []  # after the next commit
        self.spawns: list[Spawn] = []  # committed, not yet spawned

    # -- Effects ---------------------------------------------------------------------------

    def make_tasks(
        self,
        job: LiveJob,
        placement: tuple[TaskPlacement, ...],
        attempt: int,
        first_rank: int,
        started_under: Nomination | None,
    ) -> list[TaskRun] | None:
        if not self.room.take_all(placement):
            # The core never asks for this; if it ever does, nobody gets a GPU twice.
            log.error("refused start of %s: room on its nodes is taken", job.id)
            return None
        port = next((t.master_port for t in job.running), 0) or free_port()
        return [
            TaskRun(rank=first_rank + i, attempt=attempt, placement=p, master_port=port)
            for i, p in enumerate(placement)
        ]

    def give(self, job: LiveJob, tasks: Sequence[TaskRun]) -> None:
        for task in tasks:
            self.room.give(task.placement)

    def launch(self, job: LiveJob, tasks: Sequence[TaskRun], grow: bool, now: float) -> None:
        where: dict[str, float] = {}
        for task in tasks:
            name = self.nodes[task.placement.node].name
            where[name] = where.get(name, 0.0) + task.placement.gpu / GPU_MILLI
        gpus = sum(t.placement.gpu for t in tasks) / GPU_MILLI
        self._event(
            now, "start", job.id, placement=where, gpus=gpus, attempt=job.attempts, grow=grow
        )
        self.spawns.extend(Spawn(job, task) for task in tasks)

    def signal(
        self,
        job: LiveJob,
        tasks: Sequence[TaskRun],
        evict: Evict,
        now: float,
        detail: Mapping[str, Any],
    ) -> None:
        self.signals.extend(Signal(task, SIGTERM) for task in tasks)
        preemptor = self.jobs.get(evict.preemptor) if evict.preemptor else None
        self._event(
            now,
            "evict",
            job.id,
            reason=evict.reason.value,
            preemptor=evict.preemptor,
            victim_type=job.spec.type.value,
            preemptor_type=preemptor.spec.type.value if preemptor else None,
            tasks=[t.rank for t in tasks],
            gpus=sum(t.placement.gpu for t in tasks) / GPU_MILLI,
            released_at=evict.release_at,
            **detail,
        )

    def stop(self, job: LiveJob, tasks: Sequence[TaskRun], now: float) -> None:
        self.signals.extend(Signal(task, SIGTERM) for task in tasks)

    def progressing(self, job: LiveJob, gpu: int, now: float) -> None:
        pass  # utilisation is integrated from the room (`Runtime._integrate`)

    def persist(self, job: LiveJob) -> None:
        self.dirty[job.id] = job
        if job.tasks:
            self.holding[job.id] = job
        else:
            self.holding.pop(job.id, None)

    def record(self, kind: EventKind, job: LiveJob | None, now: float, **data: Any) -> None:
        large_job = data.pop("large_job", None)
        if kind is EventKind.THROTTLE_ON:
            self.throttle_writes.append((data["queue"], Throttle(data["queue"], large_job, now)))
        elif kind is EventKind.THROTTLE_OFF:
            self.throttle_writes.append((data["queue"], None))
        job_id = job.id if job is not None else large_job
        self._event(now, kind.value, job_id, **data)

    def retired(self, job: LiveJob) -> None:
        self.holding.pop(job.id, None)

    # -- carrying it out -------------------------------------------------------------------

    def _event(self, now: float, kind: str, job: str | None, **data: Any) -> None:
        self.events.append({"t": now, "kind": kind, "job": job, "data": data})

    def note(self, now: float, kind: str, job: str | None, **data: Any) -> None:
        """An event of the runtime's own (adopt, checkpoint, gpu_drain, …)."""
        self._event(now, kind, job, **data)

    def flush(self) -> None:
        """Commit what changed, then send the signals waiting on that commit."""
        while self.dirty or self.events or self.throttle_writes or self.signals:
            if self.dirty or self.events or self.throttle_writes:
                rows = [job.row() for job in self.dirty.values()]
                events, throttles = self.events, self.throttle_writes
                self.dirty, self.events, self.throttle_writes = {}, [], []
                with self.store.batch() as batch:
                    batch.update_jobs(rows)
                    batch.events(events)
                    for queue, throttle in throttles:
                        if throttle is None:
                            batch.drop_throttle(queue)
                        else:
                            batch.set_throttle(queue, throttle.job, throttle.since)
            signals, self.signals = self.signals, []
            for intent in signals:
                self.send(intent.task, intent.signum)

    def send(self, task: TaskRun, signum: Signals) -> None:
        self.launcher.signal(task.pid, task.start_ticks, signum)

    def launch_of(self, job: LiveJob, task: TaskRun) -> Launch:
        """How one task's process is started: its command, environment and files."""
        files = JobFiles(self.data_dir, job.id)
        request = job.request
        caldera_env = {
            "CUDA_VISIBLE_DEVICES": self.visible(task.placement.devices),
            "RANK": str(task.rank),
            "LOCAL_RANK": str(task.rank),
            "WORLD_SIZE": str(job.spec.tasks),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(task.master_port),
            "CALDERA_JOB_ID": job.id,
            "CALDERA_ATTEMPT": str(task.attempt),
            "CALDERA_CHECKPOINT_DIR": str(files.checkpoint),
            "CALDERA_CONTROL_DIR": str(files.control),
            "CALDERA_GRACE_PERIOD": str(self.policy.grace_period),
        }
        if job.checkpoint_step is not None:
            caldera_env["CALDERA_RESUME_STEP"] = str(job.checkpoint_step)
        if 0 < task.placement.milli < GPU_MILLI:
            caldera_env["CALDERA_GPU_FRACTION"] = f"{task.placement.milli / GPU_MILLI:g}"
        if job.spec.time_shared:
            caldera_env["CALDERA_TIME_SHARED"] = str(job.spec.time_shared)
        return Launch(
            job=job.id,
            rank=task.rank,
            attempt=task.attempt,
            command=request.command,
            # Only what the request and caldera set: nothing of the server's environment.
            env=environment(dict(request.env), caldera_env),
            cwd=Path(request.workdir or files.work),
            files=files,
            user=job.spec.user,
            queue=job.spec.queue,
            memory_mib=job.spec.memory,
            millicores=job.spec.cpu,
        )
