"""The local runtime: the same cycle as the simulator, applied to processes on this host.

One loop thread owns time. It wakes on a submission, a cancel, a process exit (polled every
`poll_interval`), a cycle's wake-up time and a periodic timer. Under the lock it brings the
job index (`caldera.core.JobIndex`) up to date with the jobs that changed, runs
`caldera.core.run` on it and on the live room (a cycle costs what changed, well under a
millisecond with thousands waiting), and applies the decisions with the same meaning as the
simulator's `_apply`; processes are spawned after the lock is released:

- start: the job's tasks are committed to the database, then spawned, each in its own process
  group through `caldera.service.runner`, with CUDA_VISIBLE_DEVICES and the rank variables;
- evict: Releasing is committed, then SIGTERM goes to each task's group; at the end of the
  grace period SIGKILL. The room stays taken until every signalled process has exited; then
  the job is requeued with its original submit time and resumes from its last checkpoint;
- nominate: the reservation is stored on the preemptor until it starts;
- hold / release / throttle on / off: Held ⇄ Pending and the queue's waiting mode.

Decisions that no longer match the job are skipped. A start that would give a GPU twice is
refused by a check against the room before anything is taken: the room is the last line of
defence, never the first.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from caldera.config import Principal
from caldera.core import (
    Decisions,
    Evict,
    EvictReason,
    JobIndex,
    Room,
    Snapshot,
    TaskPlacement,
    Throttle,
    ThrottleOff,
    ThrottleOn,
    Waiting,
    WaitingReasons,
    admit,
    run,
)
from caldera.errors import Conflict, NotFound, Rejected
from caldera.model import (
    CRITICAL_PRIORITY,
    GPU_MILLI,
    JobState,
    Node,
    Queue,
    QueueState,
    check_transition,
    shares_time,
    time_share,
)
from caldera.policies import get_policy
from caldera.service.config import ServiceConfig
from caldera.service.gpus import HostGPUs
from caldera.service.gpus.health import Finding, Recovered
from caldera.service.gpus.watch import Drain, GpuWatch
from caldera.service.jobs import LiveJob, TaskRun, spec_from_request
from caldera.service.launcher import JobFiles, Launch, Launcher, ProcessLauncher, environment
from caldera.service.store import Batch, Store
from caldera.service.views import ClusterView, DeviceView, NodeView, QueueView
from caldera.tracking import refresh_index

__all__ = ["Runtime", "RuntimeStats"]

log = logging.getLogger("caldera.service")

_MAX_CYCLES_PER_WAKE = 8
_TIMER = 5.0  # seconds: the cycle runs at least this often (effective weights move with time)
_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED})


@dataclass
class RuntimeStats:
    """Counters since this server started, for /metrics."""

    cycles: int = 0
    allocated_area: float = 0.0  # milli-GPU seconds allocated
    hung_area: float = 0.0  # milli-GPU seconds held by gangs below min_available
    observed: float = 0.0
    refused_evictions: int = 0
    throttle_held_seconds: float = 0.0
    last_poll: float | None = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Runtime:
    """Owns the live jobs; every public method is safe to call from API threads."""

    def __init__(
        self,
        config: ServiceConfig,
        store: Store,
        data_dir: Path,
        nodes: tuple[Node, ...],
        launcher: Launcher | None = None,
        clock: Callable[[], float] = time.time,
        observe_cycle: Callable[[float], None] | None = None,
        host: HostGPUs | None = None,
        gpu_watch: GpuWatch | None = None,
    ) -> None:
        self.config = config
        self.policy_config = config.policy
        self.policy = get_policy(config.policy.name)
        self.store = store
        self.data_dir = data_dir
        self.nodes = nodes
        self.launcher: Launcher = launcher if launcher is not None else ProcessLauncher()
        self.clock = clock
        self.observe_cycle = observe_cycle
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.queues: dict[str, Queue] = {q.name: q for q in config.queues}
        self.jobs: dict[str, LiveJob] = {}
        self.throttles: dict[str, Throttle] = {}
        self.room = Room(nodes)
        self.host = host  # the UUID behind each device; None: devices are plain indexes
        self.gpu_watch = gpu_watch  # GPU health; None: no health polling (virtual GPUs)
        self.stats = RuntimeStats()
        self.waiting = WaitingReasons()  # why pending jobs did not start, per the last cycle
        self._dirty: dict[str, LiveJob] = {}
        self.index = JobIndex()
        self._holding: dict[str, LiveJob] = {}  # jobs with tasks, kept by `_mark`
        self._stale: set[str] = set()
        self._events: list[dict[str, Any]] = []
        self._throttle_writes: list[tuple[str, Throttle | None]] = []
        self._actions: list[Callable[[], None]] = []
        self._spawns: list[tuple[LiveJob, TaskRun]] = []  # committed, not yet spawned
        self._cycle_needed = True
        self._next_wakeup: float | None = None
        self._last_cycle = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Take back what the database holds, then run the loop in a thread."""
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="caldera-cycle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop deciding. Running tasks keep running; the next server adopts them."""
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        interval = self.config.poll_interval
        while not self._stop.is_set():
            timeout = interval
            wakeup = self._next_wakeup
            if self._cycle_needed:
                wakeup = min(wakeup or math.inf, self._last_cycle + self.config.cycle_gap)
            if wakeup is not None:
                timeout = min(timeout, max(wakeup - self.clock(), 0.0))
            self.wake.wait(timeout)
            self.wake.clear()
            if self._stop.is_set():
                break
            try:
                self.step()
            except Exception:  # the loop must outlive one bad decision; the log says why
                log.exception("scheduling loop step failed")
                time.sleep(interval)

    def step(self) -> None:
        """One turn of the loop: look at the processes, then run the cycle if needed."""
        now = self.clock()
        # GPU health is I/O (NVML, or an nvidia-smi run): asked without holding the lock.
        health = self.gpu_watch.read(now) if self.gpu_watch is not None else None
        with self.lock:
            self._poll(now)
            if health is not None:
                self._gpu_health(health, now)
            self._flush()
            wakeup = self._next_wakeup
            since = now - self._last_cycle
            # Submissions come in bursts: one cycle per `cycle_gap` serves them all, instead
            # of one snapshot of every job per request.
            needed = (
                (self._cycle_needed and since >= self.config.cycle_gap)
                or (wakeup is not None and now >= wakeup)
                or since >= _TIMER
            )
        if needed:
            self.cycle()

    # -- the cycle -------------------------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        """The cycle's input (caller holds the lock for as long as the snapshot is used: the
        job index and the room are shared, kept up to date as jobs change)."""
        # Renew only the views of jobs that changed since the last cycle: with thousands of
        # pending jobs a cycle then costs what changed, not what exists.
        refresh_index(self.index, self._stale, self.jobs)
        if self.gpu_watch is not None:
            self.gpu_watch.hold(self.room)  # sick GPUs take no new work
        return Snapshot(
            now=now,
            nodes=self.nodes,
            queues=dict(self.queues),
            config=self.policy_config,
            throttles=dict(self.throttles),
            room=self.room,
            index=self.index,
        )

    def _busy(self) -> list[LiveJob]:
        """Jobs holding tasks (running, releasing, or finishing): few, among many waiting."""
        return list(self._holding.values())

    def cycle(self) -> Decisions:
        """Run the cycle until it stops releasing held jobs; apply each result."""
        decisions = Decisions()
        for _ in range(_MAX_CYCLES_PER_WAKE):
            # Under the lock: the cycle reads the live room and job index. It is short (it
            # costs what changed since the last cycle), and submissions only wait for it.
            with self.lock:
                self._cycle_needed = False
                now = self.clock()
                snapshot = self.snapshot(now)
                began = time.perf_counter()
                decisions = run(snapshot, self.policy)
                elapsed = time.perf_counter() - began
                self.waiting = WaitingReasons.of(decisions.waiting)
                self.stats.cycles += 1
                if self.observe_cycle is not None:
                    self.observe_cycle(elapsed)
                self._last_cycle = now
                self.apply(decisions, snapshot)
                self._next_wakeup = decisions.wakeup
            self.launch_pending()
            again = decisions.releases or any(
                isinstance(change, ThrottleOff) for change in decisions.throttles
            )
            if not again:
                break
        return decisions

    def apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        """Apply one cycle's decisions (caller holds the lock). Memory first, then one commit,
        then the side effects that depend on it, then their pids."""
        now = snapshot.now
        seen = snapshot.job_index.views
        for change in decisions.throttles:
            if isinstance(change, ThrottleOn):
                throttle = Throttle(change.queue, change.job, now)
                self.throttles[change.queue] = throttle
                self._throttle_writes.append((change.queue, throttle))
                job = self.jobs.get(change.job)
                if job is not None:
                    job.throttled_once = True
                    self._mark(job)
                self._event(now, "throttle_on", change.job, queue=change.queue)
            else:
                waiting = self.throttles.pop(change.queue, None)
                self._throttle_writes.append((change.queue, None))
                self._event(
                    now,
                    "throttle_off",
                    waiting.job if waiting else None,
                    queue=change.queue,
                    reason=change.reason,
                )
        for evict in decisions.evictions:
            job = self.jobs.get(evict.job)
            view = seen.get(evict.job)
            if job is None or view is None or job.state is not JobState.RUNNING:
                continue
            if tuple(t.placement for t in job.running) != view.placement:
                continue  # its tasks changed since the snapshot; the next cycle re-plans
            self.evict(job, evict, now)
        for missed in decisions.preempt_misses:
            job = self.jobs.get(missed)
            if job is not None:  # found no victims: back off (kept in memory only)
                job.preempt_failed_at = now
                self._stale.add(job.id)
                job.touch()
        for nominate in decisions.nominations:
            job = self.jobs.get(nominate.job)
            if job is not None and job.state is JobState.PENDING:
                job.nomination = nominate.nomination
                self._mark(job)
        for start in decisions.starts:
            job = self.jobs.get(start.job)
            if job is None:
                continue
            expected = JobState.RUNNING if start.grow else JobState.PENDING
            if job.state is expected:
                self._start(job, start.placement, start.grow, now)
        for hold in decisions.holds:
            job = self.jobs.get(hold.job)
            if job is not None and job.state is JobState.PENDING:
                self._set_state(job, JobState.HELD)
                job.hold_reason = hold.reason
                job.hold_since = now
                self._event(now, "hold", job.id, reason=hold.reason)
        for release in decisions.releases:
            job = self.jobs.get(release.job)
            if job is not None and job.state is JobState.HELD:
                held = now - (job.hold_since or now)
                if job.hold_reason == "throttle":
                    self.stats.throttle_held_seconds += held
                job.hold_reason = None
                job.hold_since = None
                self._set_state(job, JobState.PENDING)
                self._event(now, "release", job.id, reason=release.reason, held=round(held, 3))
        self._flush()

    # -- transitions -----------------------------------------------------------------------

    def _set_state(self, job: LiveJob, state: JobState) -> None:
        if job.state is not state:
            job.state = check_transition(job.state, state)
        self._mark(job)

    def _mark(self, job: LiveJob) -> None:
        """Record a change: to commit, to show the next cycle, and who holds tasks."""
        job.touch()
        self._dirty[job.id] = job
        self._stale.add(job.id)
        if job.tasks:
            self._holding[job.id] = job
        else:
            self._holding.pop(job.id, None)

    def _event(self, now: float, kind: str, job: str | None, **data: Any) -> None:
        self._events.append({"t": now, "kind": kind, "job": job, "data": data})

    def _flush(self) -> None:
        """Commit what changed, then run the side effects waiting on that commit."""
        while self._dirty or self._events or self._throttle_writes or self._actions:
            if self._dirty or self._events or self._throttle_writes:
                rows = [job.row() for job in self._dirty.values()]
                events, throttles = self._events, self._throttle_writes
                self._dirty, self._events, self._throttle_writes = {}, [], []
                with self.store.batch() as batch:
                    batch.update_jobs(rows)
                    batch.events(events)
                    self._write_throttles(batch, throttles)
            actions, self._actions = self._actions, []
            for action in actions:
                action()

    @staticmethod
    def _write_throttles(batch: Batch, writes: list[tuple[str, Throttle | None]]) -> None:
        for queue, throttle in writes:
            if throttle is None:
                batch.drop_throttle(queue)
            else:
                batch.set_throttle(queue, throttle.job, throttle.since)

    def _start(
        self, job: LiveJob, placement: tuple[TaskPlacement, ...], grow: bool, now: float
    ) -> None:
        if not self.room.take_all(placement):
            # The core never asks for this; if it ever does, nobody gets a GPU twice.
            log.error("refused start of %s: room on its nodes is taken", job.id)
            return
        if not grow:
            job.attempts += 1
            job.tasks = [t for t in job.tasks if t.leaving]
            job.exit_code = None
        first_rank = max((t.rank + 1 for t in job.running), default=0)
        port = next((t.master_port for t in job.running), 0) or _free_port()
        new = [
            TaskRun(rank=first_rank + i, attempt=job.attempts, placement=p, master_port=port)
            for i, p in enumerate(placement)
        ]
        job.tasks.extend(new)
        if job.state is JobState.PENDING:
            self._set_state(job, JobState.RUNNING)
            job.nomination = None
            job.preempt_failed_at = None
            job.start_time = now
            if job.first_start is None:
                job.first_start = now
        if job.running_since is None and len(job.running) >= job.spec.min_available:
            job.running_since = now
            job.work_base = job.saved_work
        self._mark(job)
        gpus = sum(p.gpu for p in placement) / GPU_MILLI
        where: dict[str, float] = {}
        for p in placement:
            name = self.nodes[p.node].name
            where[name] = where.get(name, 0.0) + p.gpu / GPU_MILLI
        self._event(
            now, "start", job.id, placement=where, gpus=gpus, attempt=job.attempts, grow=grow
        )
        for run_ in new:
            self._spawns.append((job, run_))

    def _spawn(self, job: LiveJob, task: TaskRun) -> None:
        files = JobFiles(self.data_dir, job.id)
        request = job.request
        caldera_env = {
            "CUDA_VISIBLE_DEVICES": self._visible(task.placement.devices),
            "RANK": str(task.rank),
            "LOCAL_RANK": str(task.rank),
            "WORLD_SIZE": str(job.spec.tasks),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(task.master_port),
            "CALDERA_JOB_ID": job.id,
            "CALDERA_ATTEMPT": str(task.attempt),
            "CALDERA_CHECKPOINT_DIR": str(files.checkpoint),
            "CALDERA_CONTROL_DIR": str(files.control),
            "CALDERA_GRACE_PERIOD": str(self.policy_config.grace_period),
        }
        if job.checkpoint_step is not None:
            caldera_env["CALDERA_RESUME_STEP"] = str(job.checkpoint_step)
        if 0 < task.placement.milli < GPU_MILLI:
            caldera_env["CALDERA_GPU_FRACTION"] = f"{task.placement.milli / GPU_MILLI:g}"
        if job.spec.time_shared:  # one of N on this GPU, no memory isolation (docs/gpus.md)
            caldera_env["CALDERA_TIME_SHARED"] = str(job.spec.time_shared)
        workdir = Path(request.get("workdir") or files.root)
        launch = Launch(
            job=job.id,
            rank=task.rank,
            attempt=task.attempt,
            command=tuple(request["command"]),
            env=environment(dict(os.environ), dict(request.get("env") or {}), caldera_env),
            cwd=workdir,
            files=files,
        )
        try:
            files.make()
            pid, ticks = self.launcher.spawn(launch)  # outside the lock: forks are slow
        except OSError as error:
            with self.lock:
                task.done = True
                task.exit_code = 127
                job.reason = f"cannot start task {task.rank}: {error.strerror or error}"
                self._mark(job)
                self._settle(job, self.clock())
                self._flush()
            return
        with self.lock:
            task.pid, task.start_ticks = pid, ticks
            self._mark(job)
            if task.leaving:  # cancelled or evicted while it was being spawned
                self._signal(task, signal.SIGTERM)
            self._flush()

    def _visible(self, devices: tuple[int, ...]) -> str:
        """CUDA_VISIBLE_DEVICES: the devices' UUIDs (GPU-… or MIG-…), indexes if virtual."""
        if self.host is None:
            return ",".join(str(d) for d in devices)
        return self.host.visible(devices)

    def launch_pending(self) -> None:
        """Spawn the tasks the last decisions started (loop thread, without the lock: a
        submission never waits for a fork). Their rows are committed already."""
        with self.lock:
            spawns, self._spawns = self._spawns, []
        for job, task in spawns:
            self._spawn(job, task)

    def _signal(self, task: TaskRun, signum: signal.Signals) -> None:
        self.launcher.signal(task.pid, task.start_ticks, signum)

    def evict(
        self, job: LiveJob, evict: Evict, now: float, grace: float | None = None, **detail: Any
    ) -> None:
        """Signal a running job (or some of its tasks) to give way (caller holds the lock).
        `grace`: seconds before SIGKILL (default: the policy's grace period)."""
        spec = job.spec
        is_cancel = evict.reason is EvictReason.CANCEL
        # A sick GPU moves every job, critical or protected too: none can run on it.
        by_user_or_hardware = is_cancel or evict.reason is EvictReason.HEALTH
        if not by_user_or_hardware and (
            spec.priority >= CRITICAL_PRIORITY or spec.protected or spec.conformance_protected
        ):
            # DESIGN §3: never, in any runtime. The core never asks; refuse if it ever does.
            self.stats.refused_evictions += 1
            log.error("refused to evict protected job %s (%s)", job.id, evict.reason)
            return
        grace = self.policy_config.grace_period if grace is None else grace
        leaving = job.begin_leaving(evict.tasks, now, grace)
        if not leaving:
            return
        for task in leaving:
            self._actions.append(partial(self._signal, task, signal.SIGTERM))
        if not by_user_or_hardware:  # preemptions count (SLA, cooldown); a sick GPU does not
            job.evictions += 1
            job.last_evicted_at = now
        if not job.running:  # the whole gang leaves
            job.evicted_for = evict.preemptor
            job.evict_reason = evict.reason.value
            job.signalled_at = now
            self._set_state(job, JobState.RELEASING)
        self._mark(job)
        preemptor = self.jobs.get(evict.preemptor) if evict.preemptor else None
        self._event(
            now,
            "evict",
            job.id,
            reason=evict.reason.value,
            preemptor=evict.preemptor,
            victim_type=spec.type.value,
            preemptor_type=preemptor.spec.type.value if preemptor else None,
            tasks=[t.rank for t in leaving],
            gpus=sum(t.placement.gpu for t in leaving) / GPU_MILLI,
            released_at=now + grace,
            **detail,
        )

    def _gpu_health(self, health: list[Finding | Recovered], now: float) -> None:
        """Drain sick devices and move their tasks off; give back the ones that recovered
        (caller holds the lock)."""
        watch = self.gpu_watch
        assert watch is not None
        drains, restored = watch.apply(health)
        for devices in restored:
            watch.release(self.room, devices)
            self._event(now, "gpu_restore", None, devices=list(devices))
            self._cycle_needed = True
        for drain in drains:
            self._drain(drain, now)

    def _drain(self, drain: Drain, now: float) -> None:
        finding = drain.finding
        self._event(
            now,
            "gpu_drain",
            None,
            gpu=finding.gpu,
            uuid=finding.uuid,
            reason=finding.reason,
            severity=finding.severity.value,
            devices=list(drain.devices),
        )
        self._cycle_needed = True
        why = {"gpu": finding.uuid, "gpu_reason": finding.reason}
        for job in self._busy():
            if job.state is JobState.RELEASING and drain.fatal:
                for task in job.tasks:  # already leaving: a dead GPU does not wait for it
                    if set(task.placement.devices) & set(drain.devices) and not task.done:
                        task.kill_at = min(task.kill_at or now, now)
                continue
            if job.state is not JobState.RUNNING:
                continue
            hit = GpuWatch.tasks_on([t.placement for t in job.running], drain.devices)
            if not hit:
                continue
            # Only the tasks on the sick GPU leave, if the gang can do without them.
            tasks = tuple(hit) if len(job.running) - len(hit) >= job.spec.min_available else ()
            grace = 0.0 if drain.fatal else None
            self.evict(job, Evict(job.id, EvictReason.HEALTH, None, tasks), now, grace, **why)

    # -- processes -------------------------------------------------------------------------

    def _poll(self, now: float) -> None:
        """Exits, SIGKILL deadlines and the jobs' status files (caller holds the lock)."""
        last = self.stats.last_poll
        if last is not None and now > last:
            allocated = self.room.capacity_milli - sum(sum(free) for free in self.room.free)
            if self.gpu_watch is not None:
                allocated -= self.gpu_watch.held_milli  # drained, not allocated
            self.stats.allocated_area += allocated * (now - last)
            self.stats.observed += now - last
        self.stats.last_poll = now
        busy = self._busy()
        if last is not None and now > last:
            for job in busy:
                alive = [t for t in job.running if not t.done]
                if (
                    alive
                    and job.state is JobState.RUNNING
                    and (len(alive) < job.spec.min_available)
                ):
                    # A gang with a dead member, until its other tasks are stopped.
                    self.stats.hung_area += sum(t.placement.gpu for t in alive) * (now - last)
        for job in busy:
            ended = False
            files = JobFiles(self.data_dir, job.id)
            for task in job.tasks:
                if task.done:
                    continue
                if task.pid is None:
                    continue  # spawned in this very flush; looked at next turn
                over, code = self.launcher.ended(
                    files, task.attempt, task.rank, task.pid, task.start_ticks
                )
                if over:
                    task.done = True
                    task.exit_code = code
                    ended = True
                    self._mark(job)
                elif task.kill_at is not None and now >= task.kill_at and not task.killed:
                    task.killed = True
                    self._signal(task, signal.SIGKILL)
                    self._mark(job)
            if job.state in (JobState.RUNNING, JobState.RELEASING):
                self._read_status(job, files, now)
            if ended:
                self._settle(job, now)

    def _read_status(self, job: LiveJob, files: JobFiles, now: float) -> None:
        """Checkpoints and progress the job reported through `caldera.sdk.preemption`."""
        try:
            entries = list(os.scandir(files.control))
        except OSError:
            return
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            try:
                mtime = entry.stat().st_mtime
            except OSError:
                continue
            if job.control_seen.get(entry.name) == mtime:
                continue
            job.control_seen[entry.name] = mtime
            report = _read_report(Path(entry.path))
            if report is None:
                continue
            progress = report.get("progress")
            if isinstance(progress, int | float) and progress != job.reported_progress:
                job.reported_progress = float(min(max(progress, 0.0), 1.0))
                self._mark(job)
            checkpoint = report.get("checkpoint")
            if not isinstance(checkpoint, dict):
                continue
            at = checkpoint.get("time")
            step = checkpoint.get("step")
            if not isinstance(at, int | float) or at <= (job.checkpoint_seen or 0.0):
                continue
            job.checkpoint_seen = float(at)
            job.checkpoint_step = step if isinstance(step, int) else job.checkpoint_step
            job.saved_work = max(job.saved_work, job.work_done(min(float(at), now)))
            self._mark(job)
            kind = "sigterm" if job.state is JobState.RELEASING else "periodic"
            self._event(now, "checkpoint", job.id, reason=kind, step=job.checkpoint_step)

    def _settle(self, job: LiveJob, now: float) -> None:
        """Give back the room of tasks that ended and move the job on if it is over."""
        for task in [t for t in job.tasks if t.leaving and t.done]:
            self.room.give(task.placement)
            job.tasks.remove(task)
            self._mark(job)
        self._cycle_needed = True
        if job.state is JobState.RELEASING:
            if not job.tasks:
                self._requeue(job, now)
        elif job.state is JobState.RUNNING:
            running = job.running
            if running and all(t.done for t in running):
                self._finish(job, running, now)
            elif job.exit_code is None:
                failed = next(
                    (t for t in running if t.done and t.exit_code != 0 and t.pid is not None),
                    None,
                )
                vanished = next((t for t in running if t.done and t.exit_code is None), None)
                if failed is not None or vanished is not None:
                    # A gang with a dead member cannot progress: stop the others too. A member
                    # that vanished unseen (never spawned, runner killed) makes the job lost,
                    # not failed: it is requeued once the others are down.
                    if failed is not None:
                        job.exit_code = failed.exit_code
                    grace = self.policy_config.grace_period
                    for task in running:
                        if not task.done and task.kill_at is None:
                            task.kill_at = now + grace
                            self._actions.append(partial(self._signal, task, signal.SIGTERM))
                    self._mark(job)
            elif not running:
                self._requeue(job, now, lost=True)
        self._retire(job)

    def _finish(self, job: LiveJob, running: list[TaskRun], now: float) -> None:
        codes = [t.exit_code for t in running]
        for task in running:
            self.room.give(task.placement)
            job.tasks.remove(task)
        if job.running_since is not None:
            job.work_base = job.work_done(now)
            job.running_since = None
        job.end_time = now
        if job.cancel_requested:
            self._set_state(job, JobState.CANCELLED)
            self._event(now, "cancel", job.id, reason="user")
        elif all(code == 0 for code in codes) and job.exit_code in (None, 0):
            job.exit_code = 0
            self._set_state(job, JobState.SUCCEEDED)
            self._event(now, "finish", job.id, exit_code=0)
        elif job.exit_code is None and any(code is None for code in codes):
            job.end_time = None
            self._requeue(job, now, lost=True)
            return
        else:
            code = job.exit_code
            if code is None:
                code = next(c for c in codes if c != 0)
            job.exit_code = code
            if job.retries < job.spec.max_retries:
                job.retries += 1
                job.end_time = None
                self._event(now, "fail", job.id, exit_code=code, retry=job.retries)
                self._requeue(job, now, retry=True)
                return
            job.reason = job.reason or f"exited with code {code}"
            self._set_state(job, JobState.FAILED)
            self._event(now, "fail", job.id, exit_code=code)
        self._mark(job)

    def _requeue(self, job: LiveJob, now: float, lost: bool = False, retry: bool = False) -> None:
        """Back to Pending with the original submit time, resuming from the last checkpoint."""
        for task in job.running:
            self.room.give(task.placement)
            job.tasks.remove(task)
        lost_seconds = job.rewind_to_checkpoint(now)
        cancelled = job.cancel_requested or job.evict_reason == EvictReason.CANCEL.value
        job.evict_reason = None
        if cancelled:
            job.end_time = now
            self._set_state(job, JobState.CANCELLED)
            self._event(now, "cancel", job.id, reason="user")
        else:
            if job.state is JobState.RUNNING and not (lost or retry):
                raise AssertionError("a running job is requeued only when lost or retried")
            self._set_state(job, JobState.PENDING)
            why = "lost" if lost else ("retry" if retry else "evicted")
            self._event(now, "requeue", job.id, reason=why, lost_gpu_seconds=lost_seconds)
        self._mark(job)

    def _retire(self, job: LiveJob) -> None:
        if job.state in _TERMINAL and not job.tasks:
            self.jobs.pop(job.id, None)

    # -- the API's calls -------------------------------------------------------------------

    def submit(self, request: dict[str, Any], user: str) -> dict[str, Any]:
        """Admit and record a normalised request; raises Rejected or ValueError.

        The row is committed before the job joins the live set (so nothing can start or
        change it first) and outside the runtime lock, so concurrent submissions commit
        together instead of one after the other (PostgreSQL groups their commits).
        """
        now = self.clock()
        job_id = "j-" + secrets.token_hex(6)
        spec = spec_from_request(job_id, request, now, user)
        queue = self.queues.get(spec.queue)
        if shares_time(spec, queue):  # kept in the request: a restart rebuilds the same spec
            spec = time_share(spec, queue)
            request = {**request, "gpu": spec.gpu, "time_shared": spec.time_shared}
        with self.lock:
            admission = admit(
                spec, self.queues, self.throttles, now, self.nodes, self.policy_config.week_offset
            )
            queue = self.queues.get(spec.queue)
        if admission.state is JobState.REJECTED:
            closed = queue is not None and queue.state is not QueueState.OPEN
            raise Rejected(admission.reason, closed)
        job = LiveJob(spec=spec, request=request, state=admission.state)
        events = [{"t": now, "kind": "submit", "job": job_id, "data": {"user": user}}]
        if admission.state is JobState.HELD:
            job.hold_reason = admission.reason
            job.hold_since = now
            events.append(
                {"t": now, "kind": "hold", "job": job_id, "data": {"reason": admission.reason}}
            )
        row = job.row()
        with self.store.batch() as batch:
            batch.insert_job(row)
            batch.events(events)
        with self.lock:
            self.jobs[job_id] = job
            self._stale.add(job_id)
            self._cycle_needed = True
        self.wake.set()
        return row

    def cancel(self, job_id: str) -> dict[str, Any]:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                row = self.store.job(job_id)
                if row is None:
                    raise NotFound(job_id)
                raise Conflict(f"job {job_id} has already ended ({row['state']})")
            now = self.clock()
            if job.state in (JobState.PENDING, JobState.HELD):
                job.end_time = now
                job.nomination = None
                self._set_state(job, JobState.CANCELLED)
                self._event(now, "cancel", job.id, reason="user")
                self._retire(job)
            elif job.state is JobState.RUNNING:
                job.cancel_requested = True
                self.evict(job, Evict(job.id, EvictReason.CANCEL), now)
            elif job.state is JobState.RELEASING:
                job.cancel_requested = True
                self._mark(job)
            else:
                raise Conflict(f"job {job_id} has already ended ({job.state.value})")
            self._cycle_needed = True
            self._flush()
            row = job.row()
        self.wake.set()
        return row

    def set_queue_state(self, name: str, state: QueueState) -> Queue:
        with self.lock:
            queue = self.queues.get(name)
            if queue is None:
                raise NotFound(name)
            queue = replace(queue, state=state)
            self.queues[name] = queue
            with self.store.batch() as batch:
                batch.set_queue_state(name, state.value)
            self._cycle_needed = True
        self.wake.set()
        return queue

    # -- restart ---------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild memory from the database and adopt the processes that are still ours."""
        with self.lock:
            for name, state in self.store.queue_states().items():
                if name in self.queues:
                    self.queues[name] = replace(self.queues[name], state=QueueState(state))
            for row in self.store.throttles():
                self.throttles[row["queue"]] = Throttle(row["queue"], row["job"], row["since"])
            now = self.clock()
            adopted = 0
            for row in self.store.active_jobs():
                job = LiveJob.from_row(row)
                self.jobs[job.id] = job
                files = JobFiles(self.data_dir, job.id)
                for task in job.tasks:
                    if task.done:
                        continue
                    if task.pid is None:
                        recorded = self.launcher.recorded(files, task.attempt, task.rank)
                        if recorded is None:
                            # Committed but never spawned: the server died in between.
                            task.done = True
                            task.exit_code = None
                            continue
                        task.pid, task.start_ticks = recorded
                    adopted += 1
                for task in list(job.tasks):
                    if self.room.can_take(task.placement):
                        self.room.take(task.placement)
                        continue
                    # Two records claim one device: stop this one rather than let a GPU be
                    # used twice, and forget it (its room belongs to the other).
                    log.error("job %s task %d overlaps another; stopping it", job.id, task.rank)
                    if not task.done:
                        self._signal(task, signal.SIGKILL)
                    job.tasks.remove(task)
                    job.exit_code = job.exit_code if task.leaving else None
                self._mark(job)
                if job.state is JobState.RUNNING and not job.tasks:
                    self._requeue(job, now, lost=True)
                if job.tasks and job.state in (JobState.RUNNING, JobState.RELEASING):
                    self._event(now, "adopt", job.id, tasks=len(job.tasks))
            for job in list(self.jobs.values()):
                if any(t.done for t in job.tasks):
                    self._settle(job, now)
            self.stats.throttle_held_seconds = sum(
                float((e.get("data") or {}).get("held", 0.0))
                for e in self.store.events_of_kind("release")
                if (e.get("data") or {}).get("reason") == "throttle"
            )
            self._flush()
            if adopted:
                log.info("adopted %d running task(s) from the previous server", adopted)

    # -- reading (`caldera.service.views`) ------------------------------------------------

    def live(self) -> list[LiveJob]:
        with self.lock:
            return list(self.jobs.values())

    @property
    def tokens(self) -> dict[str, Principal]:
        return self.config.tokens

    def has_queue(self, name: str) -> bool:
        return name in self.queues

    def is_live(self, job_id: str) -> bool:
        """Whether the job has not ended (or still holds tasks). One dict lookup: no lock."""
        return job_id in self.jobs

    def cluster_view(self) -> ClusterView:
        """Each device's free share and who holds it, waiting modes, live jobs by state."""
        holders: dict[tuple[int, int], list[str]] = {}
        leaving: set[tuple[int, int]] = set()
        queue_of: dict[str, str] = {}
        counts: dict[str, int] = {}
        with self.lock:
            free = [tuple(f) for f in self.room.free]
            throttles = {q: t.job for q, t in self.throttles.items()}
            for job in self.jobs.values():
                counts[job.state.value] = counts.get(job.state.value, 0) + 1
                if job.tasks:
                    queue_of[job.id] = job.spec.queue
                for task in job.tasks:
                    for device in task.placement.devices:
                        holders.setdefault((task.placement.node, device), []).append(job.id)
                        if task.leaving:
                            leaving.add((task.placement.node, device))
            watch = self.gpu_watch
            sick = watch.reasons() if watch is not None else {}
            held = watch.held_milli if watch is not None else 0
        host = self.host
        nodes = tuple(
            NodeView(
                node.name,
                node.gpu_model,
                tuple(
                    DeviceView(
                        d,
                        free[node.index][d],
                        tuple(holders.get((node.index, d), ())),
                        uuid=host.uuid(d) if host is not None else None,
                        drained=sick.get(d),
                        releasing=(node.index, d) in leaving,
                        profile=node.profile_of(d),
                        capacity=self.room.milli_of.get(node.profile_of(d) or "", GPU_MILLI),
                    )
                    for d in range(node.devices)
                ),
            )
            for node in self.nodes
        )
        return ClusterView(nodes, throttles, counts, held, queue_of)

    def queue_views(self) -> list[QueueView]:
        """Every queue with what it holds and what waits in it, in configuration order."""
        with self.lock:
            views = []
            for name, queue in self.queues.items():
                jobs = [j for j in self.jobs.values() if j.spec.queue == name]
                waiting = self.throttles.get(name)
                views.append(
                    QueueView(
                        queue=queue,
                        allocated=sum(t.placement.gpu for j in jobs for t in j.tasks),
                        pending=sum(j.state is JobState.PENDING for j in jobs),
                        held=sum(j.state is JobState.HELD for j in jobs),
                        running=sum(
                            j.state in (JobState.RUNNING, JobState.RELEASING) for j in jobs
                        ),
                        throttled_for=waiting.job if waiting else None,
                        throttled_since=waiting.since if waiting else None,
                    )
                )
            return views

    def waiting_for(self, job_ids: Iterable[str]) -> dict[str, Waiting]:
        """Why those of `job_ids` that are pending did not start, as the last cycle said."""
        found: dict[str, Waiting] = {}
        with self.lock:
            for job_id in job_ids:
                job = self.jobs.get(job_id)
                if job is not None and job.state is JobState.PENDING:
                    reason = self.waiting.reason(job.spec)
                    if reason is not None:
                        found[job_id] = reason
        return found


def _read_report(path: Path) -> dict[str, Any] | None:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
