"""The Kubernetes runtime: the same cycle and kernel as the simulator and the service, applied
to pods.

    observe ── TrainingJobs (admit new ones, take back running ones, forget deleted ones),
       │       pods (which tasks ended, bound, run, were deleted by someone else), nodes,
       │       the room caldera does not own
    cycle ──── caldera.core.run(snapshot) → Decisions
       │
    kernel ─── caldera.runtime.Kernel.apply: the same meaning of a decision everywhere
       │
    actuator ─ KubeActuator: status first, then PodGroup + pinned pods / evictions, Events

Each `step` reads the cluster (level-triggered: what is there, not what changed), then runs
the cycle when the scheduling loop every runtime drives (`caldera.runtime.SchedulerLoop`) says
it is due: something changed, a wake-up time came or the timer ran out. What the cluster
reports wins over what caldera remembers: a pod that is gone has ended, a pod that failed
broke its gang (the rest are stopped, then the job is retried or failed), a pod not bound
within `bind_timeout` gives the start up (requeued), a start whose PodGroup Volcano refused
(its queue missing or not Open) creates no pod and waits until Volcano says the queue is Open
(`queue_not_open`; the Volcano Queue is read again every few seconds). Room caldera does not
own — pods it did not create, cordoned or not-Ready nodes, pods of deleted jobs — is kept out
of the free-room index and never offered as a victim.

Everything it knows lives in the cluster — the TrainingJobs' status, the pods (placement,
attempt, rank), the `caldera-state` ConfigMap (queue waiting modes; decayed usage with fair
share over time, `caldera.k8s.ha.fairshare_store`) — so a controller that restarts, or a
standby taking over, rebuilds it all and carries on (`caldera.k8s.observe.intake`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from caldera.core import (
    Decisions,
    EvictReason,
    JobIndex,
    PolicyConfig,
    Room,
    Snapshot,
    TaskPlacement,
    Throttle,
    run,
)
from caldera.core.fairshare import DecayedUsage
from caldera.k8s.cluster.api import ClusterAPI, ClusterError, Object
from caldera.k8s.cluster.cache import ClusterReads, Listing
from caldera.k8s.effects.actuator import KubeActuator
from caldera.k8s.effects.guard import Purpose
from caldera.k8s.effects.volcano_waits import VolcanoWaits
from caldera.k8s.ha.fairshare_store import read_decayed_usage, write_decayed_usage
from caldera.k8s.ha.statemap import read_throttles
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.observe.intake import Intake
from caldera.k8s.observe.intakeapply import apply_intake
from caldera.k8s.observe.intakefacts import JobAdmitted
from caldera.k8s.observe.podapply import apply_pod
from caldera.k8s.observe.pods import PodWatcher, claim_unlabelled
from caldera.k8s.observe.rekey import rekey
from caldera.k8s.pacing import StartPacing, bind_wait_of, unbound_pods
from caldera.k8s.reading.nodes import Blocked, NodeState, foreign_usage, read_nodes
from caldera.k8s.reporting.events import Reason
from caldera.k8s.reporting.waiting import tell_waits
from caldera.k8s.settings import KubeSettings
from caldera.model import GPU_MILLI, JobState, Node, Queue, QueueState
from caldera.policies import get_policy
from caldera.runtime import Kernel, Outcome, SchedulerLoop
from caldera.runtime.wire import ByName, placement_from_wire
from caldera.trainingjob_api import PLACEMENT

__all__ = ["KubeRuntime", "KubeStats"]

# Seconds after a flush that left statuses to write (a start's, after its pods) before the
# loop steps again even if nothing happens: by then the pods usually run.
STATUS_AFTER_PODS = 1.0
# A step longer than this is logged with where its time went (reading, deciding, writing):
# what an operator looks at when admissions or starts lag during a burst.
LONG_STEP = 2.0

log = logging.getLogger("caldera.k8s")


@dataclass
class KubeStats:
    cycles: int = 0
    steps: int = 0


class KubeRuntime:
    """Owns the controller's view of caldera's jobs on one cluster. Not thread-safe: one
    loop (the controller) calls `step`."""

    def __init__(
        self,
        api: ClusterAPI,
        queues: Iterable[Queue],
        policy: PolicyConfig,
        settings: KubeSettings | None = None,
        clock: Callable[[], float] = time.time,
        reads: ClusterReads | None = None,
        writers: int = 1,
    ) -> None:
        """`writers`: API requests the actuator sends at once (1: one after another, in
        order, as the in-memory tests and `--once`/`--dry-run` want)."""
        self.api = api
        self.settings = settings or KubeSettings()
        # What each step reads: every object listed (tests, --once), or an informer cache.
        self.reads: ClusterReads = reads or Listing(api, self.settings)
        self.policy_config = policy
        self.policy = get_policy(policy.name)
        self.clock = clock
        self.loop = SchedulerLoop(clock)
        self._took = 0.0  # wall seconds of the last cycle's caldera.core.run
        self._deciding = 0.0  # the same, summed over the step's cycles
        self.queues: dict[str, Queue] = {q.name: q for q in queues}
        self.node_state = NodeState((), frozenset())
        self.room = Room(())
        self.stats = KubeStats()
        # Called after each cycle with (wall seconds of caldera.core.run, decisions, now):
        # the controller's /metrics (caldera.k8s.reporting.metrics).
        self.observer: Callable[[float, Decisions, float], None] | None = None
        self.throttles: dict[str, Throttle] = {}
        self.actuator = KubeActuator(
            api=api,
            settings=self.settings,
            policy=policy,
            room=self.room,
            nodes=(),
            jobs={},
            throttles=self.throttles,
            settle=self.settle,
            clock=clock,
            refused=self.eviction_refused,
            queue_not_open=self.queue_not_open,
            between=self.admit_new,
            writers=writers,
        )
        self.kernel: Kernel[KubeJob, KubeTask] = Kernel(
            self.actuator,
            policy,
            throttles=self.throttles,
            progress_on_start=False,  # useful work starts when the pods run, not at the start
        )
        self.jobs: dict[str, KubeJob] = self.kernel.jobs
        self.actuator.jobs = self.jobs
        self.intake = Intake(self)
        self.pods = PodWatcher(self)
        # Room on each node caldera may not use: what foreign pods hold (and one pod slot each).
        self._blocked: dict[int, tuple[TaskPlacement, ...]] = {}
        self.orphans: dict[tuple[str, str], TaskPlacement] = {}  # pods no job claims
        self._loaded = False
        # Queues whose Volcano Queue refused a PodGroup (missing or not Open): their jobs
        # wait as in a Closed queue (running ones carry on) until it reads Open.
        self.volcano_waits = VolcanoWaits()
        # Starts paced to the binder (`caldera.k8s.pacing`): bounded steps, short binds.
        self.pacing = StartPacing(bind_wait_of(self.settings))

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.node_state.nodes

    @property
    def keys(self) -> ByName:
        return self.actuator.keys

    @property
    def grace(self) -> int:
        return self.actuator.grace

    @property
    def cycle_needed(self) -> bool:
        """Something changed since the last cycle (the intake, the pod watcher, the actuator's
        callbacks say so): the next step runs it."""
        return self.loop.needed

    @cycle_needed.setter
    def cycle_needed(self, needed: bool) -> None:
        self.loop.needed = needed

    @property
    def next_wakeup(self) -> float | None:
        """When the loop must step even if nothing happens: a decision's wake-up, the cycle's
        timer (`SchedulerLoop.next_due`: effective weights move with time), a Volcano queue to
        look at again, a start's status that waits for its pods (written once they run, at
        most `SAY_STARTING_AFTER` or `SAY_STARTING_AFTER_PENDING` after the start:
        `caldera.k8s.effects.flush`). Nothing else
        wakes a quiet cluster's loop — not even node heartbeats, which change nothing the
        controller reads."""
        times = [t for t in (self.loop.next_due(), *self.volcano_waits.times()) if t is not None]
        if self.actuator.dirty:
            times.append(self.clock() + STATUS_AFTER_PODS)
        return min(times, default=None)

    # -- the loop's turn -------------------------------------------------------------------

    def step(self) -> Decisions | None:
        """Read the cluster, then run the cycle if it is due. Returns the last decisions.

        What the reading changed is written with what the cycle then decides, in one flush
        (statuses first, as always): a job admitted and started in the same step has its
        status written once, Running, not Pending and then Running."""
        self.stats.steps += 1
        now = self.clock()
        began = time.perf_counter()
        self._deciding = 0.0
        self.observe(now)
        read = time.perf_counter() - began
        decisions = None
        if self.loop.due(now):
            decisions = self.cycle()  # its flush goes with each result (`_apply`)
        else:
            self.actuator.flush()
        took = time.perf_counter() - began
        if took > LONG_STEP:
            log.info(
                "a long step: %.1f s (reading %.1f s, deciding %.1f s, writing the rest); %d jobs",
                took,
                read,
                self._deciding,
                len(self.actuator.jobs),
            )
        return decisions

    def observe(self, now: float) -> None:
        """Bring memory in line with the cluster: nodes, jobs, pods, foreign room. Writes
        nothing: what it queued goes with the step's flush."""
        settings = self.settings
        reads = self.reads
        state = read_nodes(reads.nodes(), settings)
        if not state.nodes and self.nodes:
            # Every node gone at once is an API or selector problem far more often than a
            # cluster that vanished; acting on it would stop every job. Keep the last list.
            log.error("the API listed no nodes; keeping the last %d", len(self.nodes))
        elif state != self.node_state:
            self._set_nodes(state, now)
        if not self._loaded:
            self._load_throttles()
            self._load_decayed_usage()
            self._loaded = True
        served = list(settings.namespaces)
        objects = [obj for namespace in served for obj in reads.jobs(namespace)]
        ours = [pod for namespace in served for pod in reads.pods(namespace)]
        running = reads.running()
        claimed, running = claim_unlabelled(running, ours, objects, served)  # by owner uid
        ours += claimed
        for taken in self.intake.reconcile(objects, ours, now):  # each applied before the next
            apply_intake(self, taken, now)
        for seen in self.pods.observe(ours, now):  # each applied before the next is made
            apply_pod(self, seen, now)
        self._block(running)
        self._recheck_volcano_queues(now)

    def admit_new(self) -> list[KubeJob]:
        """During a long flush (a burst of starts): admit the TrainingJobs that came
        meanwhile (`Intake.newcomers`), so that their status says so within seconds, not
        after the whole burst (issue 40); the actuator writes it on its own path. Returns
        the jobs admitted (the rejected are queued)."""
        now = self.clock()
        objects = [obj for ns in self.settings.namespaces for obj in self.reads.jobs(ns)]
        admitted: list[KubeJob] = []
        for taken in self.intake.newcomers(objects, now):
            apply_intake(self, taken, now)
            if isinstance(taken, JobAdmitted):
                admitted.append(taken.job)
        return admitted

    def cycle(self) -> Decisions:
        """Run the cycle until it stops releasing held jobs; apply each result."""
        return self.loop.run(self.snapshot, self._decide, self._apply)

    def _decide(self, snapshot: Snapshot) -> Decisions:
        began = time.perf_counter()
        decisions = run(snapshot, self.policy)
        self._took = time.perf_counter() - began
        self._deciding += self._took
        self.stats.cycles += 1
        return decisions

    def _apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        """The kernel's changes, why pending jobs wait, then one flush of the writes."""
        now = snapshot.now
        self.kernel.apply(decisions, snapshot)
        self.pacing.paced = self.actuator.paced = decisions.paced
        tell_waits(self, decisions, snapshot)  # why pending jobs wait (issue 34)
        self.actuator.flush()
        self._keep_decayed_usage(now)
        if self.observer is not None:
            self.observer(self._took, decisions, now)

    def snapshot(self, now: float) -> Snapshot:
        queues = dict(self.queues)
        for name in self.volcano_waits:
            if name in queues:  # admission still sees the queue Open: no job is rejected
                queues[name] = replace(queues[name], state=QueueState.CLOSED)
        budget = self.pacing.budget(unbound_pods(self.jobs.values()), now)
        return self.kernel.snapshot(now, self.nodes, queues, self.room, budget)

    # -- Volcano's queues ------------------------------------------------------------------

    def queue_not_open(self, queue: str, why: str) -> None:
        """Volcano refused a PodGroup of `queue` (`caldera.k8s.effects.volcano_waits`): its pending
        jobs wait; the Queue is read again in a few seconds."""
        self.volcano_waits.refused(queue, self.clock())
        self.cycle_needed = True

    def _recheck_volcano_queues(self, now: float) -> None:
        if self.volcano_waits.recheck(self.api, now):
            self.cycle_needed = True

    # -- jobs ------------------------------------------------------------------------------

    def settle(self, job: KubeJob) -> None:
        """Tasks of `job` ended: give back their room and let the kernel move it on."""
        if job.id not in self.jobs:
            return
        what = self.kernel.settle(job, self.clock(), job.lost_tasks)
        if what not in (Outcome.WAIT, Outcome.STOP_GANG):
            job.lost_tasks = 0
        self.cycle_needed = True

    def stop_gang(self, job: KubeJob, now: float) -> None:
        """A gang that cannot run whole (never bound, a member deleted by someone else, a
        pod that never became ready): the kernel stops the rest (`Kernel.stop_gang`); it is
        requeued when they are gone."""
        self.kernel.stop_gang(job, now)

    def take(self, job: KubeJob, task: KubeTask) -> None:
        if self.room.can_take(task.placement):
            self.room.take(task.placement)
            task.counted = True
            return
        # The node offers less than its pods hold (a device plugin restarting reports 0 GPUs
        # for a moment) or two jobs claim one device: never count a GPU twice, and never
        # stop a job for it — the room is taken again when the node's capacity is back.
        log.warning("job %s task %d does not fit its node now; not counted", job.id, task.rank)

    def replan_around(self, victim: KubeJob) -> None:
        """`victim` will not free the room it was evicted for (a pod stuck terminating): drop
        every nomination that counts on it, so the next cycle plans those preemptors again
        around what is really free (the core would wait out `nomination_timeout`)."""
        for job in self.jobs.values():
            nomination = job.nomination
            if nomination is None or victim.id not in nomination.victims:
                continue
            log.warning("%s: re-planned (victim %s does not release its room)", job.id, victim.id)
            job.nomination = None
            self.kernel.mark(job)
            self.actuator.persist(job)
        self.cycle_needed = True

    def eviction_refused(self, job: KubeJob, pod: str, why: str) -> None:
        """The Eviction API refused a victim's pod: a PodDisruptionBudget forbids it now
        (Kubernetes answers 429 and leaves the pod alone). Before, the victim stayed
        Releasing and its preemptor waited for room that never came.

        - A user's cancel goes on as a plain delete: the owner may end their own job
          whatever the budget (as `kubectl delete` does).
        - A gang that already lost pods of this eviction below `min_available` cannot run
          whole: the refused pods are stopped with it (deleted), and it is requeued.
        - Otherwise the eviction is rolled back (`Kernel.keep`): the pods it has not reached
          are not asked, the job is Running again, its reservation-holders re-planned around
          the room that stays taken; an `EvictionRefused` Event says so."""
        now = self.clock()
        if job.id not in self.jobs or job.state not in (JobState.RUNNING, JobState.RELEASING):
            return
        actuator = self.actuator
        if job.cancel_requested or job.evict_reason == EvictReason.CANCEL.value:
            actuator.note(Reason.EVICTION_REFUSED, job, now, f"{why}: cancelled: deleted instead")
            actuator.remove(job, job.namespace, pod, self.grace, Purpose.STOP)
            return
        kept = [t for t in job.tasks if t.leaving and not t.done and not t.deleting]
        if not kept:
            return
        actuator.forget_evictions(job, {t.pod for t in kept})
        if len(job.running) + len(kept) < job.spec.min_available:
            actuator.note(
                Reason.EVICTION_REFUSED,
                job,
                now,
                f"{why}: the gang already lost pods to this eviction; stopping the rest",
            )
            for task in kept:
                actuator.remove(job, job.namespace, task.pod, self.grace, Purpose.STOP)
            return
        whole = job.state is JobState.RELEASING
        preemptor = job.evicted_for
        if not self.kernel.keep(job, kept, now):
            return
        log.warning("%s: eviction refused (%s); rolled back, it keeps running", job.id, why)
        actuator.record(
            Reason.EVICTION_REFUSED,
            job,
            now,
            message=f"{why}: eviction rolled back, the job keeps running"
            + (f"; {preemptor} plans again" if preemptor else ""),
            kept=len(kept),
            whole=whole,
        )
        self.replan_around(job)

    def hold_orphan(self, key: tuple[str, str], pod: Object) -> None:
        """Keep the room of a caldera pod no job claims until the pod is gone."""
        if key in self.orphans:
            return
        text = (pod["metadata"].get("annotations") or {}).get(PLACEMENT)
        try:
            placement = placement_from_wire(json.loads(text), self.keys) if text else None
        except (ValueError, KeyError, TypeError):
            placement = None
        if placement is not None and self.room.can_take(placement):
            self.room.take(placement)
            self.orphans[key] = placement

    def release_orphan(self, key: tuple[str, str]) -> None:
        placement = self.orphans.pop(key, None)
        if placement is not None:
            self.room.give(placement)
            self.cycle_needed = True

    # -- nodes and room --------------------------------------------------------------------

    def _set_nodes(self, state: NodeState, now: float) -> None:
        """New node list: re-key every placement by node name and rebuild the room."""
        old = self.nodes
        if old == state.nodes:
            self.node_state = state
            return
        broken, self.orphans = rekey(self.jobs.values(), self.orphans, old, state.index)
        self.node_state = state
        self.room = Room(state.nodes)
        self.actuator.room = self.room
        self.actuator.nodes = state.nodes
        self._blocked = {}
        for job in self.jobs.values():
            for task in job.tasks:
                task.counted = False
                if not task.done:
                    self.take(job, task)
        for key, placement in list(self.orphans.items()):
            if self.room.can_take(placement):
                self.room.take(placement)
            else:
                del self.orphans[key]
        self.kernel.index = JobIndex()
        self.kernel.stale = set(self.jobs)
        self.cycle_needed = True
        if old:
            log.info("nodes changed: %d schedulable node(s)", len(state.nodes))
        for job in broken:
            self.settle(job)

    def _load_throttles(self) -> None:
        loaded = read_throttles(self.api, self.settings.state_namespace)
        self.throttles.clear()
        self.throttles.update(loaded)

    def _load_decayed_usage(self) -> None:
        """Fair share over time carries on from the decayed usage the last leader kept."""
        half_life = self.policy_config.fair_share_half_life
        if half_life <= 0:
            return
        kept = read_decayed_usage(self.api, self.settings.state_namespace)
        if kept is not None:
            self.kernel.decayed_usage = DecayedUsage.restored(half_life, kept)

    def _keep_decayed_usage(self, now: float) -> None:
        """Write the queues' decayed usage when due (`Kernel.usage_to_keep`). A failed write is
        logged: a restart then forgets a little more usage, and nothing else depends on it."""
        record = self.kernel.usage_to_keep(now)
        if record is None:
            return
        try:
            write_decayed_usage(self.api, self.settings.state_namespace, record)
        except ClusterError as error:
            log.warning("decayed usage not kept: %s", error)

    def _block(self, pods: list[Object]) -> None:
        """Keep room caldera does not own out of the index: foreign pods' requests, and all
        that is free on nodes that accept no new pods (cordoned, not Ready)."""
        usage = foreign_usage(pods, (n.name for n in self.nodes), self.settings)
        closed = self.node_state.closed | self.pods.withheld(self.clock())
        for node in self.nodes:
            old = self._blocked.pop(node.index, ())
            for part in old:
                self.room.give(part)
            if node.name in closed:
                want = Blocked(node.gpus, self.room.cpu[node.index], self.room.memory[node.index])
            else:
                want = usage.get(node.name, Blocked())
            free = self.room.free[node.index]
            whole = [d for d in range(node.gpus - 1, -1, -1) if free[d] == GPU_MILLI]
            devices = tuple(sorted(whole[: want.gpus]))
            pseudo = TaskPlacement(
                node.index,
                devices,
                GPU_MILLI if devices else 0,
                min(want.cpu, self.room.cpu[node.index]),
                min(want.memory, self.room.memory[node.index]),
            )
            # One pod slot for each foreign pod where the node has a pod limit: the first holds
            # their room, the rest nothing.
            held = bool(pseudo.devices or pseudo.cpu or pseudo.memory)
            wanted = max(want.pods, int(held)) if node.pods else int(held)
            slots = min(wanted, self.room.pods[node.index])
            empty = TaskPlacement(node.index, (), 0, 0, 0)
            parts = ((pseudo if held else empty), *[empty] * (slots - 1))[:slots]
            for part in parts:
                self.room.take(part)
            if parts:
                self._blocked[node.index] = parts
            if old != self._blocked.get(node.index, ()):
                self.cycle_needed = True

    def remove_pod(
        self, job: KubeJob | None, key: tuple[str, str], grace: int, purpose: Purpose
    ) -> None:
        self.actuator.remove(job, key[0], key[1], grace, purpose)
