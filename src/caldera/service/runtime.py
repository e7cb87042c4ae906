"""The local runtime: the same cycle and the same kernel as the simulator, applied to
processes on this host.

One loop thread owns time. Each turn it observes the processes (`caldera.service.observe`:
exits, SIGKILL deadlines, the jobs' reports), settles the jobs whose tasks ended through the
kernel, and runs the cycle when the scheduling loop every runtime drives
(`caldera.runtime.SchedulerLoop`) says it is due — something changed (after `cycle_gap`), a
wake-up time came or the timer ran out:

    observe ─▶ Kernel.settle ─▶ core.run(snapshot, policy) ─▶ Kernel.apply ─▶ Actuator
                                                                   (rows committed, then
                                                                    signals; then spawns)

The kernel (`caldera.runtime.Kernel`) gives every decision the meaning it has in every
runtime; the actuator (`caldera.service.actuator`) is what it means here: a start commits the
job's tasks, then spawns each in its own process group through `caldera.service.runner`; an
eviction commits Releasing, then SIGTERM goes to each leaving task's group, SIGKILL at the end
of the grace period, and the room stays taken until every signalled process has exited; then
the job is requeued with its original submit time and resumes from its last checkpoint.

The API's threads call `submit`, `cancel` and `set_queue_state` and read through the views of
`caldera.service.views`; all of it under one lock, which the loop holds only while it
decides (spawning happens after).

This module is the loop and the calls; two concerns live beside it, each a function of the
runtime under the same lock: `caldera.service.submissions` (a group of submissions admitted
— their `JobSpec` from the request record — committed together, then live) and
`caldera.service.polling` (what `observe` saw, applied).
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from caldera.config import Principal
from caldera.core import (
    Decisions,
    Evict,
    Room,
    Snapshot,
    Throttle,
    Waiting,
    WaitingReasons,
    run,
)
from caldera.core.fairshare import DecayedUsage
from caldera.errors import Conflict, NotFound
from caldera.model import Node, Queue, QueueState
from caldera.policies import get_policy
from caldera.runtime import Kernel, SchedulerLoop
from caldera.runtime.requests import RequestRecord
from caldera.service import polling
from caldera.service.actuator import Actuator
from caldera.service.config import ServiceConfig
from caldera.service.gpus import HostGPUs
from caldera.service.gpus.health import Finding, Recovered
from caldera.service.gpus.watch import Drain, GpuWatch
from caldera.service.health import KillNow, drain_intents
from caldera.service.intake import GroupWorker, Submission
from caldera.service.jobs import LiveJob, TaskRun
from caldera.service.launcher import Launcher, ProcessLauncher
from caldera.service.recovery import recover
from caldera.service.spawner import Spawner
from caldera.service.store import Store
from caldera.service.submissions import accept
from caldera.service.usage import RuntimeStats
from caldera.service.views import (
    ClusterView,
    QueueView,
    cluster_view,
    queue_views,
    waiting_for,
)

__all__ = ["Runtime", "RuntimeStats"]


log = logging.getLogger("caldera.service")


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
        self.clock = clock
        self.observe_cycle = observe_cycle
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.queues: dict[str, Queue] = {q.name: q for q in config.queues}
        self.room = Room(nodes)
        self.host = host  # the UUID behind each device; None: devices are plain indexes
        self.gpu_watch = gpu_watch  # GPU health; None: no health polling (virtual GPUs)
        self.waiting = WaitingReasons()  # why pending jobs did not start, per the last cycle
        jobs: dict[str, LiveJob] = {}
        self.actuator = Actuator(
            self.room,
            nodes,
            config.policy,
            store,
            launcher if launcher is not None else ProcessLauncher(),
            data_dir,
            jobs,
            self._visible,
        )
        self.kernel: Kernel[LiveJob, TaskRun] = Kernel(self.actuator, config.policy, jobs)
        self.jobs = self.kernel.jobs
        self.throttles: dict[str, Throttle] = self.kernel.throttles
        self.stats = RuntimeStats(kernel=self.kernel.stats)
        # Submissions come in bursts: one cycle per `cycle_gap` serves them all, instead of
        # one snapshot of every job per request.
        self.loop = SchedulerLoop(clock, gap=config.cycle_gap)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spawner: Spawner[LiveJob, TaskRun] | None = None  # once the loop runs
        self._intake: GroupWorker[Submission] | None = None  # the API's submissions, likewise

    @property
    def launcher(self) -> Launcher:
        """How processes are started, signalled and watched (the actuator's: one for both)."""
        return self.actuator.launcher

    @launcher.setter
    def launcher(self, launcher: Launcher) -> None:
        self.actuator.launcher = launcher

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Take back what the database holds, then run the loop in a thread."""
        self.recover()
        self._spawner = Spawner(self._spawn_if_wanted, lambda job: job.id)
        self._spawner.start()
        self._intake = GroupWorker(self._accept, "caldera-intake")
        self._thread = threading.Thread(target=self._loop, name="caldera-cycle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop deciding. Running tasks keep running; the next server adopts them."""
        intake, self._intake = self._intake, None
        if intake is not None:  # what was queued is committed and answered first
            intake.close()
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._spawner is not None:
            self._spawner.stop()
        with self.lock:
            self._keep_decayed_usage(self.clock(), force=True)

    def _loop(self) -> None:
        interval = self.config.poll_interval
        last_poll = -math.inf
        while not self._stop.is_set():
            timeout = max(last_poll + interval - self.clock(), 0.0)
            wakeup = self.loop.wake_at()
            if wakeup is not None:
                timeout = min(timeout, max(wakeup - self.clock(), 0.0))
            self.wake.wait(timeout)
            self.wake.clear()
            if self._stop.is_set():
                break
            # The processes are looked at every `poll_interval` (or when a deadline is due),
            # not at each wake: a submission wakes the loop for the cycle only, and polling
            # every task's files under the lock per submission cost more than the submission.
            now = self.clock()
            due = self.loop.wakeup
            poll = now - last_poll >= interval or (due is not None and now >= due)
            if poll:
                last_poll = now
            try:
                self.step(poll)
            except Exception:  # the loop must outlive one bad decision; the log says why
                log.exception("scheduling loop step failed")
                time.sleep(interval)

    def step(self, poll: bool = True) -> None:
        """One turn of the loop: look at the processes (`poll`), then run the cycle if
        needed."""
        now = self.clock()
        # GPU health is I/O (NVML, or an nvidia-smi run): asked without holding the lock.
        health = self.gpu_watch.read(now) if poll and self.gpu_watch is not None else None
        with self.lock:
            if poll:
                polling.poll(self, now)
            if health is not None:
                self._gpu_health(health, now)
            self.actuator.flush()
            needed = self.loop.due(now)
        if needed:
            self.cycle()

    # -- the cycle -------------------------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        """The cycle's input (caller holds the lock for as long as the snapshot is used: the
        job index and the room are shared, kept up to date as jobs change)."""
        if self.gpu_watch is not None:
            self.gpu_watch.hold(self.room)  # sick GPUs take no new work
        return self.kernel.snapshot(now, self.nodes, dict(self.queues), self.room)

    def cycle(self) -> Decisions:
        """Run the cycle until it stops releasing held jobs; apply each result. Each cycle
        runs under the lock (it reads the live room and job index; it is short, costing what
        changed since the last one, and submissions only wait for it); its spawns follow
        outside it."""
        return self.loop.run(
            self.snapshot, self.decide, self.apply, lock=self.lock, after=self._spawn_started
        )

    def decide(self, snapshot: Snapshot) -> Decisions:
        """One cycle of the core, timed for /metrics; why pending jobs wait is kept for the
        API (caller holds the lock)."""
        began = time.perf_counter()
        decisions = run(snapshot, self.policy)
        elapsed = time.perf_counter() - began
        self.waiting = WaitingReasons.of(decisions.waiting)
        self.stats.cycles += 1
        if self.observe_cycle is not None:
            self.observe_cycle(elapsed)
        return decisions

    def _spawn_started(self, decisions: Decisions) -> None:
        self.launch_pending()

    def apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        """Apply one cycle's decisions (caller holds the lock): the kernel changes memory,
        then one commit, then the signals that depend on it (spawns: `launch_pending`)."""
        self.kernel.apply(decisions, snapshot)
        self.actuator.flush()
        self._keep_decayed_usage(snapshot.now)

    def _keep_decayed_usage(self, now: float, force: bool = False) -> None:
        """Write the queues' decayed usage (fair share over time) when due, or now (`force`,
        on stop): a restart carries on from it (`recover`). A failed write is logged: the
        decisions already applied, and the spawns that follow them, do not wait on it."""
        record = self.kernel.usage_to_keep(now, force)
        if record is None:
            return
        try:
            with self.store.batch() as batch:
                batch.keep_decayed_usage(record)
        except Exception as error:  # the database's own errors, whatever the driver
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            log.warning("decayed usage not kept: %s", first)

    # -- processes -------------------------------------------------------------------------

    def settle(self, job: LiveJob, now: float) -> None:
        """Tasks of `job` ended: the kernel moves it on (caller holds the lock)."""
        self.kernel.settle(job, now)
        self.loop.needed = True

    def launch_pending(self) -> None:
        """Spawn the tasks the last decisions started, without the lock (a submission never
        waits for a fork). Their rows are committed already. Once the loop runs, the spawner
        thread does it (`caldera.service.spawner`): a job of many tasks never holds the loop
        up, other jobs' tasks take turns with it, and a task stopped before its turn is never
        spawned."""
        with self.lock:
            spawns, self.actuator.spawns = self.actuator.spawns, []
        for intent in spawns:
            if self._spawner is not None:
                self._spawner.put(intent.job, intent.task)
            else:
                self._spawn_if_wanted(intent.job, intent.task)

    def _spawn_if_wanted(self, job: LiveJob, task: TaskRun) -> None:
        """Spawn `task` unless it was stopped (cancel, eviction, a failed gang member) while
        it waited: then it ends unspawned and its room goes back."""
        with self.lock:
            wanted = not task.done and not (task.leaving or task.kill_at is not None)
            if not task.done and not wanted:
                task.done = True
                task.exit_code = None
                job.forget_unrun_work()
                self.kernel.mark(job)
                self.settle(job, self.clock())
                self.actuator.flush()
        if wanted:
            self._spawn(job, task)

    def _spawn(self, job: LiveJob, task: TaskRun) -> None:
        launch = self.actuator.launch_of(job, task)
        try:
            pid, ticks = self.launcher.spawn(launch)  # outside the lock: forks are slow
        except Exception as error:  # whatever it was, it fails this task, not the loop
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            with self.lock:
                task.done = True
                task.exit_code = 127
                job.reason = f"cannot start task {task.rank}: {reason}"
                job.forget_unrun_work()
                self.kernel.mark(job)
                self.settle(job, self.clock())
                self.actuator.flush()
            return
        with self.lock:
            task.pid, task.start_ticks = pid, ticks
            self.kernel.mark(job)
            if task.leaving or task.kill_at is not None:  # stopped while it was being spawned
                self.actuator.send(task, signal.SIGTERM)
            self.actuator.flush()

    def _visible(self, devices: tuple[int, ...]) -> str:
        """CUDA_VISIBLE_DEVICES: the devices' UUIDs (GPU-… or MIG-…), indexes if virtual."""
        if self.host is None:
            return ",".join(str(d) for d in devices)
        return self.host.visible(devices)

    def evict(
        self, job: LiveJob, evict: Evict, now: float, grace: float | None = None, **detail: Any
    ) -> None:
        """Signal a running job (or some of its tasks) to give way (caller holds the lock).
        `grace`: seconds before SIGKILL (default: the policy's grace period)."""
        self.kernel.evict(job, evict, now, grace, detail)

    # -- GPU health ------------------------------------------------------------------------

    def _gpu_health(self, health: list[Finding | Recovered], now: float) -> None:
        """Drain sick devices and move their tasks off; give back the ones that recovered
        (caller holds the lock)."""
        watch = self.gpu_watch
        assert watch is not None
        drains, restored = watch.apply(health)
        for devices in restored:
            watch.release(self.room, devices)
            self.actuator.note(now, "gpu_restore", None, devices=list(devices))
            self.loop.needed = True
        for drain in drains:
            self._drain(drain, now)

    def _drain(self, drain: Drain, now: float) -> None:
        finding = drain.finding
        self.actuator.note(
            now,
            "gpu_drain",
            None,
            gpu=finding.gpu,
            uuid=finding.uuid,
            reason=finding.reason,
            severity=finding.severity.value,
            devices=list(drain.devices),
        )
        self.loop.needed = True
        holding = list(self.actuator.holding.values())
        for intent in drain_intents(drain, holding, self.policy_config.grace_period, now):
            if isinstance(intent, KillNow):  # already leaving: a lost GPU does not wait
                intent.task.kill_at = min(intent.task.kill_at or now, now)
            else:
                self.kernel.evict(intent.job, intent.evict, now, intent.grace, intent.detail)

    # -- the API's calls -------------------------------------------------------------------

    def submit(
        self,
        request: RequestRecord | dict[str, Any],
        user: str,
        audit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Admit and record a request (its record or the record's wire form), in the
        caller's thread; raises Rejected or ValueError. `audit(row)`: the audit log's row
        for this acceptance, committed with the job's (both are, or neither). The API uses
        `enqueue`."""
        if not isinstance(request, RequestRecord):
            request = RequestRecord.from_wire(request)
        submission = Submission(request, user, audit=audit)
        self._accept([submission])
        return submission.future.result()

    def enqueue(self, submission: Submission) -> Future[dict[str, Any]]:
        """Admit and record a submission with every other one waiting (`GroupWorker`): one
        transaction for the group. Its future gets the job's row once it is committed, or
        the exception that refused it (Rejected, ValueError, the limits' LimitError)."""
        if self._intake is None:  # the loop is not running (tests): at once, here
            self._accept([submission])
        else:
            self._intake.put(submission)
        return submission.future

    def _accept(self, group: list[Submission]) -> None:
        """Admit, commit and take live a group of submissions (`caldera.service.submissions`)."""
        accept(self, group)

    def cancel(self, job_id: str) -> dict[str, Any]:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                row = self.store.job(job_id)
                if row is None:
                    raise NotFound(job_id)
                raise Conflict(f"job {job_id} has already ended ({row['state']})")
            if not self.kernel.cancel(job, self.clock()):
                raise Conflict(f"job {job_id} has already ended ({job.state.value})")
            self.loop.needed = True
            self.actuator.flush()
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
            self.loop.needed = True
        self.wake.set()
        return queue

    # -- restart ---------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild memory from the database and adopt the processes that are still ours;
        fair share over time carries on from the decayed usage kept."""
        recover(self)
        half_life = self.policy_config.fair_share_half_life
        kept = self.store.decayed_usage() if half_life > 0 else None
        if kept is not None:
            self.kernel.decayed_usage = DecayedUsage.restored(half_life, kept)

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
        return cluster_view(self)

    def queue_views(self) -> list[QueueView]:
        """Every queue with what it holds and what waits in it, in configuration order."""
        return queue_views(self)

    def waiting_for(self, job_ids: Iterable[str]) -> dict[str, Waiting]:
        """Why those of `job_ids` that are pending did not start, as the last cycle said."""
        return waiting_for(self, job_ids)
