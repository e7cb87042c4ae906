"""The Kubernetes runtime: the same cycle as the simulator and the service, applied to pods.

Each `step` reads the cluster (level-triggered: what is there, not what changed), then runs
the cycle when something changed, a wake-up time came or the timer ran out, and applies the
decisions with the same meaning as the other runtimes:

- start: the record is updated first (state Running, the attempt's tasks and their decided
  placements), then the Service (gangs), the attempt's PodGroup and one pod per task are
  created, each pod pinned to its decided node (`caldera.k8s.render`);
- evict: Releasing is recorded, then each leaving pod is deleted with the grace period
  (SIGTERM, then SIGKILL from the kubelet). The room stays taken until the pod object is gone;
  then the job is requeued with its original submit time and resumes from its last checkpoint;
- nominate: the reservation is written on the preemptor's record (`caldera.io/nomination`);
- hold / release / throttle: Held ⇄ Pending on the record; the queues' waiting modes live in
  the `caldera-state` ConfigMap.
So a controller that restarts — or a second one taking over — rebuilds everything from the
cluster: records, pods and the state ConfigMap.

What the cluster reports wins over what caldera remembers: a pod that is gone has ended, a pod
that failed broke its gang (the rest are stopped, then the job is retried or failed), a pod
Volcano did not bind within `bind_timeout` gives the start up (requeued). Room caldera does not
own — pods it did not create, cordoned or not-Ready nodes, pods of deleted records — is kept
out of the free-room index and is never offered as a victim.

No delete leaves without two checks: the job (critical, protected, conformance-protected jobs
are never evicted) and the live pod (`caldera.k8s.guard`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from pydantic import ValidationError

from caldera.core import (
    Decisions,
    Evict,
    JobIndex,
    Nomination,
    PolicyConfig,
    Room,
    Snapshot,
    TaskPlacement,
    Throttle,
    ThrottleOff,
    admit,
    run,
)
from caldera.errors import RequestError
from caldera.k8s import names
from caldera.k8s.api import (
    ClusterAPI,
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    Object,
    from_rfc3339,
)
from caldera.k8s.guard import Purpose, refusal
from caldera.k8s.nodes import Blocked, NodeState, foreign_usage, read_nodes
from caldera.k8s.records import (
    JobRequest,
    KubeJob,
    KubeTask,
    RecordError,
    parse_request,
    spec_from_request,
)
from caldera.k8s.render import Owner, RenderError, Workload, render_start
from caldera.k8s.settings import KubeSettings
from caldera.model import (
    GPU_MILLI,
    JobState,
    JobType,
    Node,
    Queue,
)
from caldera.model.lifecycle import TERMINAL
from caldera.policies import get_policy
from caldera.runtime import EventKind, Kernel, KernelStats
from caldera.runtime.wire import ByName, nomination_to_wire, placement_from_wire

__all__ = ["KubeRuntime", "KubeStats", "workload_of"]

log = logging.getLogger("caldera.k8s")

_MAX_CYCLES_PER_STEP = 8
_TIMER = 5.0  # seconds: the cycle runs at least this often (effective weights move with time)
_NOT_RUNNING = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass
class KubeStats:
    cycles: int = 0
    refused_deletes: int = 0  # the live pod failed the guard
    api_errors: int = 0
    kernel: KernelStats = field(default_factory=KernelStats)

    @property
    def refused_evictions(self) -> int:
        """Evictions of jobs that are never victims, refused before touching the API."""
        return self.kernel.refused_evictions


def workload_of(request: JobRequest) -> Workload:
    return Workload(
        image=request.image or "",
        command=tuple(request.command),
        args=tuple(request.args),
        env=dict(request.env),
        template=request.template,
    )


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is not None and "exitCode" in terminated:
            return int(terminated["exitCode"])
    phase = status.get("phase")
    return 0 if phase == "Succeeded" else (1 if phase == "Failed" else None)


def _started_at(pod: Mapping[str, Any]) -> float | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running")
        if running and running.get("startedAt"):
            return from_rfc3339(str(running["startedAt"]))
    return None


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
    ) -> None:
        self.api = api
        self.settings = settings or KubeSettings()
        self.policy_config = policy
        self.policy = get_policy(policy.name)
        self.clock = clock
        self.queues: dict[str, Queue] = {q.name: q for q in queues}
        self.kernel: Kernel[KubeJob, KubeTask] = Kernel(self, policy, progress_on_start=False)
        self.jobs = self.kernel.jobs
        self.throttles: dict[str, Throttle] = self.kernel.throttles
        self.node_state = NodeState((), frozenset())
        self.keys = ByName(())  # placements in records name their node
        self.room = Room(())
        self.stats = KubeStats(kernel=self.kernel.stats)
        self._blocked: dict[int, TaskPlacement] = {}  # room on each node caldera may not use
        self._orphans: dict[tuple[str, str], TaskPlacement] = {}  # pods of forgotten jobs
        self._dirty: dict[str, KubeJob] = {}
        self._rendered: dict[str, list[Object]] = {}  # a start's objects, made before launch
        self._throttles_dirty = False
        self._actions: list[Callable[[], None]] = []
        self._unreadable: set[tuple[str, str]] = set()  # records present but unreadable
        self._loaded = False
        self._cycle_needed = True
        self._next_wakeup: float | None = None
        self._last_cycle = -math.inf

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.node_state.nodes

    @property
    def grace(self) -> int:
        return math.ceil(self.policy_config.grace_period)

    @property
    def next_wakeup(self) -> float | None:
        return self._next_wakeup

    # -- the loop's turn -------------------------------------------------------------------

    def step(self) -> Decisions | None:
        """Read the cluster, then run the cycle if it is due. Returns the last decisions."""
        now = self.clock()
        self.observe(now)
        wakeup = self._next_wakeup
        due = (
            self._cycle_needed
            or (wakeup is not None and now >= wakeup)
            or now - self._last_cycle >= _TIMER
        )
        return self.cycle() if due else None

    def observe(self, now: float) -> None:
        """Bring memory in line with the cluster: nodes, records, pods, foreign room."""
        settings = self.settings
        state = read_nodes(self.api.list_nodes(settings.node_selector), settings)
        if not state.nodes and self.nodes:
            # Every node gone at once is an API or selector problem far more often than a
            # cluster that vanished; acting on it would stop every job. Keep the last list.
            log.error("the API listed no nodes; keeping the last %d", len(self.nodes))
        elif state != self.node_state:
            self._set_nodes(state, now)
        if not self._loaded:
            self._load_throttles()
            self._loaded = True
        records = self.api.list_config_maps(settings.namespace, f"{names.JOB_RECORD}=true")
        ours = self.api.list_pods(settings.namespace, f"{names.MANAGED}=true")
        running = self.api.list_pods("", "", _NOT_RUNNING)
        self._reconcile_records(records, now)
        self._reconcile_pods(ours, now)
        self._block(running)
        self._flush()

    def cycle(self) -> Decisions:
        """Run the cycle until it stops releasing held jobs; apply each result."""
        decisions = Decisions()
        for _ in range(_MAX_CYCLES_PER_STEP):
            self._cycle_needed = False
            now = self.clock()
            snapshot = self.snapshot(now)
            decisions = run(snapshot, self.policy)
            self.stats.cycles += 1
            self._last_cycle = now
            self.apply(decisions, snapshot)
            self._next_wakeup = decisions.wakeup
            again = decisions.releases or any(
                isinstance(change, ThrottleOff) for change in decisions.throttles
            )
            if not again:
                break
        return decisions

    def snapshot(self, now: float) -> Snapshot:
        return self.kernel.snapshot(now, self.nodes, dict(self.queues), self.room)

    # -- reading the cluster ---------------------------------------------------------------

    def _set_nodes(self, state: NodeState, now: float) -> None:
        """New node list: re-key every placement by node name and rebuild the room."""
        old = self.nodes
        if old == state.nodes:
            self.node_state = state
            return
        index = state.index

        def moved(task: TaskPlacement) -> TaskPlacement | None:
            node = index.get(old[task.node].name) if old else None
            return replace(task, node=node) if node is not None else None

        broken: list[KubeJob] = []
        for job in self.jobs.values():
            for task in job.tasks:
                placement = moved(task.placement)
                if placement is None:
                    # Its node is gone: so is the pod, whatever the API still shows.
                    task.done, task.exit_code = True, None
                    broken.append(job)
                else:
                    task.placement = placement
            if job.nomination is not None:
                kept = [moved(t) for t in job.nomination.placement]
                job.nomination = (
                    None if any(t is None for t in kept) else self._renominate(job, kept, moved)
                )
            self._touch(job)
        self._orphans = {
            key: placement
            for key, task in self._orphans.items()
            if (placement := moved(task)) is not None
        }
        self.node_state = state
        self.keys = ByName(state.nodes)
        self.room = Room(state.nodes)
        self._blocked = {}
        for job in self.jobs.values():
            for task in job.tasks:
                task.counted = False
                if not task.done:
                    self._take(job, task)
        for key, placement in list(self._orphans.items()):
            if self.room.can_take(placement):
                self.room.take(placement)
            else:
                del self._orphans[key]
        self.kernel.index = JobIndex()
        self.kernel.stale.update(self.jobs)
        self._cycle_needed = True
        if old:
            log.info("nodes changed: %d schedulable node(s)", len(state.nodes))
        for job in broken:
            self._settle(job, now)

    @staticmethod
    def _renominate(
        job: KubeJob,
        placement: list[TaskPlacement | None],
        moved: Callable[[TaskPlacement], TaskPlacement | None],
    ) -> Any:
        nomination = job.nomination
        assert nomination is not None
        pending = []
        for victim in nomination.pending:
            tasks = [moved(t) for t in victim.tasks]
            if any(t is None for t in tasks):
                return None
            pending.append(replace(victim, tasks=tuple(t for t in tasks if t)))
        return replace(
            nomination, placement=tuple(t for t in placement if t), pending=tuple(pending)
        )

    def _take(self, job: KubeJob, task: KubeTask) -> None:
        if self.room.can_take(task.placement):
            self.room.take(task.placement)
            task.counted = True
            return
        # The node offers less than its pods hold (a device plugin restarting reports 0 GPUs
        # for a moment) or two records claim one device: never count a GPU twice, and never
        # stop a job for it — the room is taken again when the node's capacity is back.
        log.warning("job %s task %d does not fit its node now; not counted", job.id, task.rank)

    def _give(self, task: KubeTask) -> None:
        if task.counted:
            self.room.give(task.placement)
            task.counted = False

    def _load_throttles(self) -> None:
        namespace = self.settings.state_namespace
        found = self.api.read_config_map(namespace, names.STATE_CONFIG_MAP)
        if found is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": names.STATE_CONFIG_MAP,
                    "labels": {names.MANAGED: "true"},
                },
                "data": {"throttles": "{}"},
            }
            with contextlib.suppress(ClusterConflict):
                self.api.create_config_map(namespace, body)
            return
        data = json.loads((found.get("data") or {}).get("throttles") or "{}")
        self.throttles.clear()  # the kernel's: kept the same object
        self.throttles.update(
            (queue, Throttle(queue, str(row["job"]), float(row["since"])))
            for queue, row in data.items()
        )

    def _reconcile_records(self, records: list[Object], now: float) -> None:
        present: set[str] = set()
        self._unreadable = set()
        for record in records:
            metadata = record["metadata"]
            namespace, name, uid = metadata["namespace"], metadata["name"], metadata["uid"]
            job_id = names.job_id(namespace, name)
            present.add(job_id)
            known = self.jobs.get(job_id)
            if known is not None:
                if known.uid == uid:
                    continue
                self._forget(known)  # deleted and re-created between two looks
            annotations = metadata.get("annotations") or {}
            status_text = annotations.get(names.STATUS)
            if status_text is None:
                self._admit(record, now)
                continue
            try:
                status = json.loads(status_text)
                state = JobState(status["state"])
            except (ValueError, KeyError, TypeError):
                # Edited by hand into something unreadable: leave its pods alone (their
                # room stays taken) rather than guess; an operator has to look.
                log.error("record %s has an unreadable %s annotation", job_id, names.STATUS)
                self._unreadable.add((namespace, name))
                continue
            if state in TERMINAL:
                continue
            self._load(record, status, now)
        for job_id, job in list(self.jobs.items()):
            if job_id not in present:
                self._forget(job)

    def _load(self, record: Object, status: dict[str, Any], now: float) -> None:
        """Take back a job a previous controller was running (restart, fail-over)."""
        metadata = record["metadata"]
        annotations = metadata.get("annotations") or {}
        try:
            # The request as admitted (a record edited later does not change a job).
            request = (
                JobRequest.model_validate(status["request"])
                if "request" in status
                else parse_request(record)
            )
        except (RecordError, ValidationError) as error:
            log.error(
                "record %s/%s is no longer valid: %s",
                metadata["namespace"],
                metadata["name"],
                " ".join(str(error).split()),
            )
            self._unreadable.add((metadata["namespace"], metadata["name"]))
            return
        nomination = annotations.get(names.NOMINATION)
        job = KubeJob.from_record(
            request,
            metadata["namespace"],
            metadata["name"],
            metadata["uid"],
            status,
            json.loads(nomination) if nomination else None,
            self.keys,
        )
        self.jobs[job.id] = job
        for task in job.tasks:
            if not task.done:
                self._take(job, task)
        self._touch(job)
        self._cycle_needed = True
        if job.lost_tasks or any(t.done for t in job.tasks):
            self._settle(job, now)

    def _admit(self, record: Object, now: float) -> None:
        """The platform layer (DESIGN §7): accept, hold or reject a new record."""
        metadata = record["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        try:
            problem = names.name_problem(name)
            if problem:
                raise RecordError(problem)
            request = parse_request(record)
            if request.type is JobType.CRITICAL and not self.settings.critical_allowed(namespace):
                raise RecordError(
                    f"namespace {namespace} may not submit critical jobs "
                    "(kubernetes.critical_namespaces)"
                )
            workload_of(request).check(self.settings)
            spec = spec_from_request(request, namespace, name, now)
        except RequestError as error:  # RecordError, RenderError, a request no runtime runs
            self._reject(namespace, name, str(error), now)
            return
        admission = admit(
            spec,
            self.queues,
            self.throttles,
            now,
            self.nodes,
            self.policy_config.week_offset,
        )
        if admission.state is JobState.REJECTED:
            self._reject(namespace, name, admission.reason, now)
            return
        job = KubeJob(
            spec=spec,
            request=request,
            namespace=namespace,
            name=name,
            uid=metadata["uid"],
            state=admission.state,
        )
        if admission.state is JobState.HELD:
            job.hold_reason = admission.reason
            job.hold_since = now
        self.jobs[job.id] = job
        self.kernel.mark(job)
        self._cycle_needed = True
        log.info("admitted %s (%s, %s): %s", job.id, spec.type.value, spec.queue, job.state.value)

    def _reject(self, namespace: str, name: str, reason: str, now: float) -> None:
        log.info("rejected %s/%s: %s", namespace, name, reason)
        status = {"state": JobState.REJECTED.value, "reason": reason, "submit": now}
        self._patch_record(
            namespace,
            name,
            {
                "metadata": {
                    "labels": {names.STATE: JobState.REJECTED.value},
                    "annotations": {names.STATUS: json.dumps(status, separators=(",", ":"))},
                }
            },
        )

    def _forget(self, job: KubeJob) -> None:
        """The record is gone (the user deleted it): stop the pods, keep their room until
        they are gone, drop the job."""
        log.info("record of %s deleted: stopping its pods", job.id)
        for task in job.tasks:
            if task.done:
                self._give(task)
                continue
            if task.counted:  # its room stays taken until the pod is gone
                self._orphans[(job.namespace, task.pod)] = task.placement
            self._actions.append(
                partial(self._delete_pod, job.namespace, task.pod, self.grace, Purpose.CLEANUP)
            )
        job.tasks = []
        del self.jobs[job.id]
        self._dirty.pop(job.id, None)
        self.kernel.stale.add(job.id)
        self._cycle_needed = True

    def _reconcile_pods(self, pods: list[Object], now: float) -> None:
        by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        unclaimed = dict(by_key)
        for job in list(self.jobs.values()):
            changed = False
            late = broken = False
            for task in job.tasks:
                if task.done:
                    continue
                pod = unclaimed.pop((job.namespace, task.pod), None)
                if pod is None:
                    task.done, task.exit_code = True, None  # gone: deleted, evicted, node lost
                    changed = True
                    continue
                phase = (pod.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    task.done, task.exit_code = True, _exit_code(pod)
                    changed = True
                    continue
                if pod["spec"].get("nodeName") and not task.bound:
                    task.bound = True
                    self.kernel.mark(job)
                deleting = "deletionTimestamp" in pod["metadata"]
                if deleting and not (task.leaving or task.stopping):
                    # Someone else is deleting a running task's pod (a drain, kubectl, the
                    # node lifecycle controller): the task is ending, so is its gang.
                    broken = True
                if (task.leaving or task.stopping) and not deleting:
                    # Recorded as signalled but the delete never went out (a restart in
                    # between): send it now.
                    purpose = Purpose.EVICT if task.leaving else Purpose.STOP
                    self._actions.append(
                        partial(self._delete_pod, job.namespace, task.pod, self.grace, purpose)
                    )
                if (
                    not task.bound
                    and not (task.leaving or task.stopping)
                    and now - task.created_at > self.settings.bind_timeout
                ):
                    late = True
                self._read_reports(job, pod, now)
            self._note_running(job, by_key, now)
            if changed:
                self._settle(job, now)
            elif (late or broken) and job.state is JobState.RUNNING:
                if late:
                    log.warning(
                        "%s: pods not bound in %.0f s; giving the start up",
                        job.id,
                        self.settings.bind_timeout,
                    )
                else:
                    log.warning("%s: a pod is being deleted by someone else; stopping", job.id)
                self._stop_gang(job, now)
        for key, pod in unclaimed.items():
            self._orphan(key, pod)
        for key in [k for k in self._orphans if k not in by_key]:
            self.room.give(self._orphans.pop(key))
            self._cycle_needed = True

    def _orphan(self, key: tuple[str, str], pod: Object) -> None:
        """A caldera pod no job claims (its record was deleted, or left from an old attempt)."""
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            placement = self._orphans.pop(key, None)
            if placement is not None:
                self.room.give(placement)
                self._cycle_needed = True
            return
        if key in self._orphans:
            return
        text = (pod["metadata"].get("annotations") or {}).get(names.PLACEMENT)
        try:
            placement = placement_from_wire(json.loads(text), self.keys) if text else None
        except (ValueError, KeyError, TypeError):
            placement = None
        if placement is not None and self.room.can_take(placement):
            self.room.take(placement)
            self._orphans[key] = placement
        job = (pod["metadata"].get("labels") or {}).get(names.JOB, "")
        if (key[0], job) in self._unreadable:
            return  # its record exists but cannot be read: hold the room, touch nothing
        if "deletionTimestamp" not in pod["metadata"]:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds") or self.grace)
            self._actions.append(partial(self._delete_pod, key[0], key[1], grace, Purpose.CLEANUP))

    def _note_running(
        self, job: KubeJob, pods: Mapping[tuple[str, str], Object], now: float
    ) -> None:
        """Useful work starts when `min_available` tasks' containers run, not at the start
        decision: images take time to pull."""
        if job.state is not JobState.RUNNING or job.running_since is not None:
            return
        starts = []
        for task in job.running:
            pod = pods.get((job.namespace, task.pod))
            if task.done or pod is None or (pod.get("status") or {}).get("phase") != "Running":
                continue
            starts.append(_started_at(pod) or now)
        if len(starts) >= job.spec.min_available:
            job.running_since = min(max(starts), now)
            job.work_base = job.saved_work
            self.kernel.mark(job)

    def _read_reports(self, job: KubeJob, pod: Object, now: float) -> None:
        """Progress and checkpoints a job wrote on its own pod (optional)."""
        annotations = pod["metadata"].get("annotations") or {}
        progress = annotations.get(names.PROGRESS)
        if progress is not None:
            try:
                value = min(max(float(progress), 0.0), 1.0)
            except ValueError:
                value = None
            if value is not None and value != job.reported_progress:
                job.reported_progress = value
                self.kernel.mark(job)
        checkpoint = annotations.get(names.CHECKPOINT)
        if checkpoint is None:
            return
        try:
            data = json.loads(checkpoint)
            at = float(data["time"] if isinstance(data, dict) else data)
        except (ValueError, KeyError, TypeError):
            return
        if at > (job.checkpoint_seen or 0.0):
            job.checkpoint_seen = at
            job.saved_work = max(job.saved_work, job.work_done(min(at, now)))
            self.kernel.mark(job)

    def _block(self, pods: list[Object]) -> None:
        """Keep room caldera does not own out of the index: foreign pods' requests, and all
        that is free on nodes that accept no new pods (cordoned, not Ready)."""
        usage = foreign_usage(pods, (n.name for n in self.nodes), self.settings)
        closed = self.node_state.closed
        for node in self.nodes:
            old = self._blocked.pop(node.index, None)
            if old is not None:
                self.room.give(old)
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
            if pseudo.devices or pseudo.cpu or pseudo.memory:
                self.room.take(pseudo)
                self._blocked[node.index] = pseudo
            if old != self._blocked.get(node.index):
                self._cycle_needed = True

    # -- applying decisions (the kernel) and its effects here --------------------------------

    def apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        """Apply one cycle's decisions: memory first, then the records, then the cluster."""
        self.kernel.apply(decisions, snapshot)
        self._flush()

    def evict(self, job: KubeJob, evict: Evict, now: float) -> None:
        """Delete a running job's pods (or some) with the grace period."""
        self.kernel.evict(job, evict, now)

    def _touch(self, job: KubeJob) -> None:
        """A change the next snapshot must see, but the record need not (found on reading)."""
        job.touch()
        self.kernel.stale.add(job.id)

    def make_tasks(
        self,
        job: KubeJob,
        placement: tuple[TaskPlacement, ...],
        attempt: int,
        first_rank: int,
        started_under: Nomination | None,
    ) -> list[KubeTask] | None:
        grow = attempt == job.attempts
        master = min((t.rank for t in job.running), default=first_rank)
        try:
            objects = render_start(
                job.spec,
                workload_of(job.request),
                placement,
                self.nodes,
                attempt,
                self.policy_config.grace_period,
                self.settings,
                first_rank=first_rank,
                master_rank=master,
                owner=Owner(job.name, job.uid),
                started_under=started_under,
                grow=grow,
            )
        except RenderError as error:
            self._fail_unstartable(job, str(error), self.clock())
            return None
        if not self.room.take_all(placement):
            # The core never asks for this; if it ever does, nobody gets a GPU twice.
            log.error("refused start of %s: room on its nodes is taken", job.id)
            return None
        if not grow:
            job.started_under = nomination_to_wire(started_under, self.keys)
        self._rendered[job.id] = objects
        return [
            KubeTask(
                rank=first_rank + i,
                attempt=attempt,
                placement=p,
                pod=names.pod_name(job.name, attempt, first_rank + i),
                counted=True,
            )
            for i, p in enumerate(placement)
        ]

    def give(self, job: KubeJob, tasks: Sequence[KubeTask]) -> None:
        for task in tasks:
            if task.counted:
                self.room.give(task.placement)
                task.counted = False

    def launch(self, job: KubeJob, tasks: Sequence[KubeTask], grow: bool, now: float) -> None:
        where = ", ".join(
            f"{self.nodes[t.placement.node].name}:{t.placement.gpu / GPU_MILLI:g}" for t in tasks
        )
        log.info("start %s attempt %d on %s", job.id, job.attempts, where)
        for task in tasks:
            task.created_at = now  # Volcano has `bind_timeout` from here to bind it
        for obj in self._rendered.pop(job.id, []):
            self._actions.append(partial(self._create, job, obj))

    def signal(
        self,
        job: KubeJob,
        tasks: Sequence[KubeTask],
        evict: Evict,
        now: float,
        detail: Mapping[str, Any],
    ) -> None:
        for task in tasks:
            self._actions.append(
                partial(self._delete_pod, job.namespace, task.pod, self.grace, Purpose.EVICT)
            )
        log.info(
            "evict %s tasks %s (%s for %s), grace %d s",
            job.id,
            [t.rank for t in tasks],
            evict.reason.value,
            evict.preemptor,
            self.grace,
        )

    def stop(self, job: KubeJob, tasks: Sequence[KubeTask], now: float) -> None:
        for task in tasks:
            task.stopping = True
            self._actions.append(
                partial(self._delete_pod, job.namespace, task.pod, self.grace, Purpose.STOP)
            )

    def progressing(self, job: KubeJob, gpu: int, now: float) -> None:
        pass

    def persist(self, job: KubeJob) -> None:
        self._dirty[job.id] = job

    def record(self, kind: EventKind, job: KubeJob | None, now: float, **data: Any) -> None:
        if kind in (EventKind.THROTTLE_ON, EventKind.THROTTLE_OFF):
            self._throttles_dirty = True
            log.info("queue %s: %s (%s)", data["queue"], kind.value, data.get("large_job"))
            return
        if job is None:
            return
        if kind is EventKind.REQUEUE:
            job.lost_tasks = 0
            self._cleanup_attempt(job, keep_service=True)
            log.info(
                "requeue %s (%s), lost %.0f GPU-seconds",
                job.id,
                data["reason"],
                data["lost_gpu_seconds"],
            )
        elif kind in (EventKind.FINISH, EventKind.FAIL, EventKind.CANCEL):
            job.lost_tasks = 0
            log.info("%s %s: %s", job.id, kind.value, data)

    def retired(self, job: KubeJob) -> None:
        if job.attempts:
            self._cleanup_attempt(job, keep_service=False)
        self._dirty[job.id] = job  # the final state must reach the record

    def _fail_unstartable(self, job: KubeJob, reason: str, now: float) -> None:
        log.error("cannot start %s: %s", job.id, reason)
        job.reason = reason
        job.end_time = now
        job.nomination = None
        self.kernel.set_state(job, JobState.FAILED)
        self.kernel.retire(job)

    def _create(self, job: KubeJob, obj: Object) -> None:
        kind = obj["kind"]
        create = {
            "Pod": self.api.create_pod,
            "PodGroup": self.api.create_pod_group,
            "Service": self.api.create_service,
        }[kind]
        try:
            create(job.namespace, obj)
        except ClusterConflict:
            return  # already there (a retried step): the same object
        except ClusterUnavailable:
            raise
        except ClusterError as error:
            self.stats.api_errors += 1
            log.error("cannot create %s %s: %s", kind, obj["metadata"]["name"], error)
            if kind == "Pod":
                # Refused for good (webhook, quota, RBAC): the task ended before it began.
                for task in job.tasks:
                    if task.pod == obj["metadata"]["name"] and not task.done:
                        task.done, task.exit_code = True, 1
                        job.reason = str(error)
                if job.id in self.jobs:
                    self._settle(job, self.clock())

    def _delete_pod(self, namespace: str, name: str, grace: int, purpose: Purpose) -> None:
        """Every pod deletion goes through here: read the live pod, check it, delete it."""
        pod = self.api.read_pod(namespace, name)
        if pod is None or "deletionTimestamp" in pod["metadata"]:
            return  # gone, or already going: its own grace period runs
        refused = refusal(pod, purpose)
        if refused is not None:
            self.stats.refused_deletes += 1
            log.error("refused to delete pod (%s): %s", purpose.value, refused)
            return
        # The uid precondition: if a newer pod took the name, it is not the one we meant.
        with contextlib.suppress(ClusterConflict):
            self.api.delete_pod(namespace, name, grace, pod["metadata"].get("uid"))

    def _stop_gang(self, job: KubeJob, now: float) -> None:
        """A gang that cannot run whole (Volcano never bound it, or someone else deletes a
        pod): stop the rest; `_settle` retries or fails it when they are gone."""
        stopping = [t for t in job.running if not t.done and not t.stopping]
        for task in stopping:
            task.kill_at = now + self.policy_config.grace_period
        if stopping:
            self.stop(job, stopping, now)
            self.kernel.mark(job)

    def _settle(self, job: KubeJob, now: float) -> None:
        """Tasks of `job` ended (or its pods' nodes are gone): the kernel moves it on."""
        self.kernel.mark(job)
        self.kernel.settle(job, now, job.lost_tasks)
        self._cycle_needed = True

    def _cleanup_attempt(self, job: KubeJob, keep_service: bool) -> None:
        group = names.pod_group_name(job.name, job.attempts)
        self._actions.append(partial(self._quiet, self.api.delete_pod_group, job.namespace, group))
        if not keep_service and job.spec.tasks > 1:
            self._actions.append(
                partial(self._quiet, self.api.delete_service, job.namespace, job.name)
            )

    def _quiet(self, delete: Callable[[str, str], bool], namespace: str, name: str) -> None:
        try:
            delete(namespace, name)
        except ClusterUnavailable:
            raise
        except ClusterError as error:
            self.stats.api_errors += 1
            log.warning("cleanup of %s/%s failed: %s", namespace, name, error)

    # -- writing -----------------------------------------------------------------------------

    def _patch_record(self, namespace: str, name: str, patch: Object) -> None:
        try:
            self.api.patch_config_map(namespace, name, patch)
        except ClusterUnavailable:
            raise
        except ClusterError as error:
            self.stats.api_errors += 1
            log.warning("cannot update record %s/%s: %s", namespace, name, error)

    def _flush(self) -> None:
        """Write the records and the waiting modes, then make the changes that need them."""
        while self._dirty or self._throttles_dirty or self._actions:
            dirty, self._dirty = self._dirty, {}
            for job in dirty.values():
                self._patch_record(
                    job.namespace,
                    job.name,
                    {
                        "metadata": {
                            "labels": {
                                names.STATE: job.state.value,
                                names.JOB_TYPE: job.spec.type.value,
                                names.QUEUE: job.spec.queue,
                            },
                            "annotations": {
                                names.STATUS: job.status_json(self.keys),
                                names.NOMINATION: job.nomination_json(self.keys),
                            },
                        }
                    },
                )
            if self._throttles_dirty:
                self._throttles_dirty = False
                data = {
                    queue: {"job": t.job, "since": t.since}
                    for queue, t in sorted(self.throttles.items())
                }
                self._patch_state({"data": {"throttles": json.dumps(data, sort_keys=True)}})
            actions, self._actions = self._actions, []
            for action in actions:
                try:
                    action()
                except ClusterUnavailable:
                    raise
                except ClusterError as error:
                    self.stats.api_errors += 1
                    log.error("cluster call failed: %s", error)

    def _patch_state(self, patch: Object) -> None:
        namespace = self.settings.state_namespace
        try:
            self.api.patch_config_map(namespace, names.STATE_CONFIG_MAP, patch)
        except ClusterUnavailable:
            raise
        except ClusterError:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": names.STATE_CONFIG_MAP, "labels": {names.MANAGED: "true"}},
                **patch,
            }
            self.api.create_config_map(namespace, body)
