"""Replay a (compressed) scenario on a real control plane and measure it from the API server.

One `replay(...)` call starts a dev cluster with the scenario's nodes as KWOK nodes
(caldera.devcluster), submits the jobs at their (compressed) times as each runtime's users
would (caldera.replay.manifests), follows every pod through one watch stream, and feeds a
`Timeline` (caldera.replay.measure) from what it sees:

    pod bound (spec.nodeName set)          → the task holds its GPUs; the job starts once
                                             `min_available` of its tasks are bound
    deletion requested (deletionTimestamp) → an eviction (pods of one job deleted within one
                                             second form one eviction), the task is releasing
    pod gone (DELETED)                     → its GPUs are free
    pod Succeeded                          → the job finished

Times are when the watch event arrived, on this process's monotonic clock, from the moment the
first job could be submitted (sub-second; the API server's own timestamps have whole seconds:
`creationTimestamp`, the PodScheduled condition written by the binding, `deletionTimestamp`).
Both are kept, and `KubeRun.skew` says how far they disagree.

The replay also plays the jobs' part (the training processes KWOK does not run), as the
simulator assumes jobs behave:
- a job makes progress while at least `min_available` of its pods are bound and not leaving;
  it then finishes at `duration − saved work` from that moment: every running pod of it gets
  `caldera.io/kwok-succeed-at` (KWOK's stage completes the pod then);
- when an eviction takes it below `min_available` it stops: the work since its last save is
  lost (`checkpoint.interval`, or none at all when it checkpoints on SIGTERM and the policy
  lets it, `PolicyConfig.emergency_checkpoint`), the pods left keep their GPUs but make no
  progress (gang hang: their finish time moves far ahead) until the gang is whole again;
- a job that checkpoints on SIGTERM exits `checkpoint.cost` seconds after it (KWOK's
  `caldera.io/kwok-exit-after-term`) and reports the checkpoint on its pod for caldera's
  controller (`caldera.io/checkpoint`).

What each mode runs:
- `volcano`: the real vc-scheduler as seed 001 and vc-controller-manager; the jobs are Volcano
  Jobs (Volcano re-creates an evicted pod, as its job controller does with no policy set);
- `caldera-volcano`: caldera's controller (`caldera k8s run`, its own process) in front of the
  real vc-scheduler, configured as docs/kubernetes.md says (`VOLCANO_FOR_CALDERA`);
- `caldera`: caldera's controller with kube-scheduler (no Volcano needed: what CI runs).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import queue as queue_mod
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from caldera.config import Scenario
from caldera.devcluster import DevCluster, ScenarioNodes
from caldera.devcluster.volcano import SEED_001, VOLCANO_FOR_CALDERA, VolcanoBins
from caldera.k8s.client import load_api_client
from caldera.k8s.crd import training_job_crd
from caldera.k8s.render import priority_classes, volcano_queue
from caldera.k8s.settings import KubeSettings
from caldera.model import GPU_MILLI, JobSpec, Queue
from caldera.replay.compress import compress
from caldera.replay.manifests import (
    IMAGE,
    REPLAY_JOB,
    caldera_job,
    hyper_nodes,
    k8s_names,
    volcano_job,
)
from caldera.replay.measure import Occurrence, Timeline
from caldera.trainingjob_api import CHECKPOINT, GROUP, JOB, PLURAL, VERSION

__all__ = ["MODES", "VOLCANO_FOR_CALDERA", "KubeRun", "Mode", "replay"]

k8s: Any = kubernetes

NAMESPACE = "replay"
FAR = "2100-01-01T00:00:00Z"  # a paused pod's finish: long after any replay
EVICTION_WINDOW = 1.0  # seconds: deletions of one job's pods this close are one eviction


@dataclass(frozen=True, slots=True)
class Mode:
    key: str
    label: str
    policy: str  # the simulator policy this runtime is compared with
    scheduler: str  # the pods' schedulerName
    controller: bool  # caldera's controller decides (else users submit Volcano Jobs)
    needs_volcano: bool


MODES: dict[str, Mode] = {
    # the real vc-scheduler runs seed 001's configuration: its simulator model is the one-tier
    # variant of the baseline (docs/baselines.md, `volcano-seed001`)
    "volcano": Mode("volcano", "k8s: Volcano", "volcano-seed001", "volcano", False, True),
    "caldera-volcano": Mode(
        "caldera-volcano", "k8s: caldera + Volcano", "caldera", "volcano", True, True
    ),
    "caldera": Mode(
        "caldera", "k8s: caldera + kube-scheduler", "caldera", "default-scheduler", True, False
    ),
}


@dataclass
class KubeRun:
    """One replay: the result document (as the simulator's, in scenario seconds), the
    utilization series, what it took, and how far the API server's timestamps and the watch
    disagreed."""

    mode: Mode
    result: dict[str, Any]
    series: list[tuple[float, float]]
    wall_seconds: float
    skew: dict[str, float]
    start_order: list[str]
    victims: list[str]
    notes: list[str] = field(default_factory=list)


def _retrying(call: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """`call()`, again while the API server answers 429 (storage initializing, API priority
    and fairness) or 5xx, up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except Exception as error:
            status = getattr(error, "status", None)
            if not (status == 429 or (isinstance(status, int) and status >= 500)):
                raise
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replay: {what}: the API server kept answering {status}"
                ) from None
            time.sleep(0.5)


def _rfc3339(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class _Pod:
    uid: str
    name: str
    job: str
    bound: float | None = None
    deleting: float | None = None
    succeeded: float | None = None
    gone: float | None = None
    finish_at: str | None = None  # the succeed-at last written on it
    api_bound: float | None = None
    api_deleting: float | None = None


@dataclass
class _Job:
    spec: JobSpec  # compressed
    name: str
    pods: dict[str, _Pod] = field(default_factory=dict)
    progressing: bool = False
    running_since: float = 0.0
    work_base: float = 0.0
    saved: float = 0.0
    finish_at: float | None = None
    finished: bool = False
    evicting: tuple[float, int, float] | None = None  # (first t, tasks, lost) of an open group

    def running(self) -> list[_Pod]:
        return [
            p
            for p in self.pods.values()
            if p.bound is not None and p.deleting is None and p.succeeded is None and p.gone is None
        ]


class _Replay:
    def __init__(
        self,
        scenario: Scenario,
        mode: Mode,
        factor: float,
        cluster: DevCluster,
        log: Callable[[str], None],
    ) -> None:
        self.original = scenario
        self.scenario = compress(scenario.with_policy(mode.policy), factor)
        self.mode = mode
        self.factor = factor
        self.cluster = cluster
        self.log = log
        self.config = self.scenario.config
        specs = [s.spec for s in self.scenario.submissions if s.invalid is None]
        self.names = k8s_names(specs)
        self.jobs = {self.names[s.id]: _Job(s, self.names[s.id]) for s in specs}
        self.by_name = {job.name: job.spec for job in self.jobs.values()}
        capacity = sum(n.gpus for n in scenario.nodes) * GPU_MILLI
        self.timeline = Timeline(
            self.by_name,
            capacity,
            scenario.with_policy(mode.policy).config.slo,
            self.scenario.warmup,
            self.scenario.until,
        )
        self.pods: dict[str, _Pod] = {}
        self.events: queue_mod.Queue[tuple[str, float, Any]] = queue_mod.Queue()
        self.stop = threading.Event()
        self.api = load_api_client(str(cluster.kubeconfig()))
        self.core = k8s.client.CoreV1Api(self.api)
        self.custom = k8s.client.CustomObjectsApi(self.api)
        self.t0 = 0.0
        self.wall0 = 0.0
        self.skew: list[float] = []
        self.start_order: list[str] = []
        self.victims: list[str] = []
        self.controller: subprocess.Popen[bytes] | None = None
        self.notes: list[str] = []

    # -- clock ------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def wall(self, t: float) -> float:
        return self.wall0 + t

    # -- set-up -----------------------------------------------------------------------------

    def setup(self, folder: Path) -> None:
        core = self.core
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        deadline = time.monotonic() + 60
        while not any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account(NAMESPACE).items
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("replay: the namespace's default service account never came")
            time.sleep(0.1)
        if self.mode.controller:
            self._install_crd()
            self._start_controller(folder)
            return
        scheduling = k8s.client.SchedulingV1Api(self.api)
        for body in priority_classes():
            _retrying(partial(scheduling.create_priority_class, body), "PriorityClass")
        settings = KubeSettings()
        for queue in self.scenario.queues:
            body = volcano_queue(queue, settings)
            create = self.custom.create_cluster_custom_object
            _retrying(
                partial(create, "scheduling.volcano.sh", "v1beta1", "queues", body),
                "creating a queue",
            )
        if any(
            s.topology is not None and s.topology.mode.value == "hard"
            for s in self.by_name.values()
        ):
            node_names = ScenarioNodes(self.scenario.nodes).names()
            for body in hyper_nodes(self.scenario.nodes, node_names):
                _retrying(
                    partial(
                        self.custom.create_cluster_custom_object,
                        "topology.volcano.sh", "v1alpha1", "hypernodes", body,
                    ),
                    "creating a HyperNode",
                )  # fmt: skip
        self._wait_queues_open()

    def _install_crd(self) -> None:
        """The TrainingJob CRD, as an operator installs it (`caldera k8s render --crds`)."""
        extensions = k8s.client.ApiextensionsV1Api(self.api)
        _retrying(
            partial(extensions.create_custom_resource_definition, training_job_crd()),
            "creating the TrainingJob CRD",
        )
        name = f"{PLURAL}.{GROUP}"
        deadline = time.monotonic() + 60
        while True:
            crd = extensions.read_custom_resource_definition(name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("replay: the TrainingJob CRD was never established")
            time.sleep(0.1)

    def _wait_queues_open(self) -> None:
        deadline = time.monotonic() + 60
        wanted = {q.name for q in self.scenario.queues}
        while True:
            items = _retrying(
                lambda: self.custom.list_cluster_custom_object(
                    "scheduling.volcano.sh", "v1beta1", "queues"
                ),
                "listing queues",
            )["items"]
            open_ = {
                q["metadata"]["name"]
                for q in items
                if (q.get("status") or {}).get("state") == "Open"
            }
            if wanted <= open_:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replay: Volcano never opened the queues {sorted(wanted - open_)}"
                )
            time.sleep(0.1)

    def _controller_config(self) -> dict[str, Any]:
        config = self.config
        policy = {
            "name": config.name,
            "grace_period": config.grace_period,
            "throttle_timeout": config.throttle_timeout,
            "cooldown": config.cooldown,
            "eviction_budget": config.eviction_budget,
            "alpha": config.alpha,
            "beta": config.beta,
            "emergency_checkpoint": config.emergency_checkpoint,
            "throttle": config.throttle,
            "nomination_timeout": config.nomination_timeout,
            "preempt_backoff": config.preempt_backoff,
            "lossy_patience": config.lossy_patience,
            "ceiling": config.ceiling,
            "slo": dict(config.slo),
        }
        return {
            "queues": [_queue_model(q) for q in self.scenario.queues],
            "policy": policy,
            "kubernetes": {
                "namespaces": {
                    NAMESPACE: {"queues": [q.name for q in self.scenario.queues], "critical": True}
                },
                "state_namespace": NAMESPACE,
                "scheduler_name": self.mode.scheduler,
                "image": IMAGE,
                "resync": 1,
                "bind_timeout": 60,
                "leader_election": {"enabled": False},  # one controller per replay
            },
        }

    def _start_controller(self, folder: Path) -> None:
        config = folder / "caldera.yaml"
        config.write_text(yaml.safe_dump(self._controller_config(), sort_keys=False))
        log = (folder / "controller.log").open("wb")
        command = [
            sys.executable, "-c", "from caldera.cli.main import main; main()",
            "k8s", "run", "--kubeconfig", str(self.cluster.kubeconfig()), "--config", str(config),
        ]  # fmt: skip
        try:
            self.controller = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_COLOR": "1"},
            )
        finally:
            log.close()
        # it creates the PriorityClasses and Queues on start
        deadline = time.monotonic() + 60
        wanted = {q.name for q in self.scenario.queues}
        while True:
            if self.controller.poll() is not None:
                tail = (folder / "controller.log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"replay: caldera's controller exited: {tail}")
            items = _retrying(
                lambda: self.custom.list_cluster_custom_object(
                    "scheduling.volcano.sh", "v1beta1", "queues"
                ),
                "listing queues",
            )["items"]
            if wanted <= {q["metadata"]["name"] for q in items}:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("replay: caldera's controller never created the queues")
            time.sleep(0.2)
        if self.mode.scheduler == "volcano":
            self._wait_queues_open()

    def stop_controller(self) -> None:
        proc = self.controller
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # -- the watch --------------------------------------------------------------------------

    def watch(self) -> None:
        """One pod watch on the replay's namespace; events go to the main thread with the time
        they arrived. A watch that ends or fails is reopened from the last resourceVersion, a
        410 Gone re-lists."""
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    listed = self.core.list_namespaced_pod(NAMESPACE, _preload_content=False)
                    data = json.loads(listed.data)
                    version = data["metadata"]["resourceVersion"]
                    self.events.put(("LIST", self.now(), data["items"]))
                response = self.core.list_namespaced_pod(
                    NAMESPACE,
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=20,
                    _preload_content=False,
                )
                buffer = b""
                for chunk in response.stream(amt=None):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        arrived = self.now()
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = ""  # 410 Gone or worse: list again
                            break
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if event.get("type") != "BOOKMARK":
                            self.events.put((event["type"], arrived, obj))
                    if self.stop.is_set() or not version:
                        break
                response.release_conn()
            except Exception as error:  # the API server is busy or restarting: try again
                if self.stop.is_set():
                    return
                self.events.put(("NOTE", self.now(), f"watch: {error.__class__.__name__}"))
                version = ""
                time.sleep(0.5)

    # -- submissions ------------------------------------------------------------------------

    def _annotations(self, spec: JobSpec) -> dict[str, str]:
        checkpoint = spec.checkpoint
        config = self.config
        if (
            config.emergency_checkpoint
            and checkpoint.on_sigterm
            and checkpoint.cost <= config.grace_period
        ):
            return {"caldera.io/kwok-exit-after-term": f"{checkpoint.cost:.3f}"}
        return {}

    def submit(self, spec: JobSpec) -> None:
        name = self.names[spec.id]
        annotations = self._annotations(spec)
        if self.mode.controller:
            body = caldera_job(spec, name, NAMESPACE, annotations)
            _retrying(
                lambda: self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, body
                ),
                name,
            )
        else:
            grace = int(self.config.grace_period)
            body = volcano_job(spec, name, NAMESPACE, grace, annotations)
            _retrying(
                lambda: self.custom.create_namespaced_custom_object(
                    "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", body
                ),
                name,
            )
        self.timeline.add(Occurrence(self.now(), "submit", name))

    # -- what the pods show -----------------------------------------------------------------

    def handle(self, kind: str, t: float, payload: Any) -> None:
        if kind == "NOTE":
            self.notes.append(str(payload))
            return
        if kind == "LIST":
            listed = {p["metadata"]["uid"] for p in payload}
            for uid, pod in list(self.pods.items()):
                if uid not in listed and pod.gone is None:
                    self._gone(pod, t)
            for obj in payload:
                self._pod(obj, t)
            return
        if kind == "DELETED":
            self._pod(payload, t)
            deleted = self.pods.get(payload["metadata"]["uid"])
            if deleted is not None:
                self._gone(deleted, t)
            return
        self._pod(payload, t)

    def _pod(self, obj: Mapping[str, Any], t: float) -> None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = labels.get(REPLAY_JOB) or labels.get(JOB)
        job = self.jobs.get(str(name))
        if job is None:
            return
        uid = str(meta["uid"])
        pod = self.pods.get(uid)
        if pod is None:
            pod = self.pods[uid] = _Pod(uid, str(meta["name"]), job.name)
            job.pods[uid] = pod
        if pod.gone is not None:
            return
        status = obj.get("status") or {}
        if (obj.get("spec") or {}).get("nodeName") and pod.bound is None:
            pod.bound = t
            for condition in status.get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
                    pod.api_bound = _parse_time(condition.get("lastTransitionTime"))
            self._bound(job, pod, t)
        if meta.get("deletionTimestamp") and pod.deleting is None:
            pod.deleting = t
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            deletion = _parse_time(meta["deletionTimestamp"])
            if deletion is not None:
                pod.api_deleting = deletion - grace
            self._leaving(job, pod, t)
        if status.get("phase") == "Succeeded" and pod.succeeded is None:
            pod.succeeded = t
            self._succeeded(job, t)

    def _bound(self, job: _Job, pod: _Pod, t: float) -> None:
        if job.finished:
            return
        if pod.api_bound is not None:
            self.skew.append(self.wall(t) - pod.api_bound)
        before = len(job.running()) - 1
        self.timeline.add(Occurrence(t, "bind", job.name, tasks=1))
        if before < job.spec.min_available <= before + 1 and job.name not in self.start_order:
            self.start_order.append(job.name)
        self._progress(job, t)

    def _progress(self, job: _Job, t: float) -> None:
        """The job's training: start (or resume) once the gang is whole; keep every running
        pod's finish instant where the job would end."""
        running = job.running()
        spec = job.spec
        if not job.progressing and len(running) >= spec.min_available and not job.finished:
            job.progressing = True
            job.running_since = t
            job.work_base = job.saved
            job.finish_at = t + max((spec.duration or 0.0) - job.work_base, 0.0)
        if job.progressing and job.finish_at is not None:
            at = _rfc3339(self.wall(job.finish_at))
            for pod in running:
                if pod.finish_at != at:
                    self._annotate(pod, {"caldera.io/kwok-succeed-at": at})
                    pod.finish_at = at

    def _leaving(self, job: _Job, pod: _Pod, t: float) -> None:
        if job.finished or pod.bound is None or pod.succeeded is not None:
            return  # a pending pod deleted, or the pods of a job that ended
        if pod.api_deleting is not None:
            self.skew.append(self.wall(t) - pod.api_deleting)
        spec = job.spec
        staying = job.running()
        lost = 0.0
        if job.progressing and len(staying) < spec.min_available:
            work = job.work_base + (t - job.running_since)
            checkpoint = spec.checkpoint
            config = self.config
            emergency = (
                config.emergency_checkpoint
                and checkpoint.on_sigterm
                and checkpoint.cost <= config.grace_period
            )
            saved = work if emergency else checkpoint.resume_point(work, job.saved)
            held = (len(staying) + 1) * spec.gpu / GPU_MILLI
            lost = held * max(work - saved, 0.0)
            job.saved = saved
            job.progressing = False
            job.finish_at = None
            for other in staying:  # the gang hangs: what is left makes no progress
                self._annotate(other, {"caldera.io/kwok-succeed-at": FAR})
                other.finish_at = FAR
            if emergency and self.mode.controller:
                report = json.dumps({"time": self.wall(t)})
                self._annotate(pod, {CHECKPOINT: report})
        if job.evicting is None:
            job.evicting = (t, 1, lost)
            self.victims.append(job.name)
        else:
            first, tasks, so_far = job.evicting
            job.evicting = (first, tasks + 1, so_far + lost)

    def _gone(self, pod: _Pod, t: float) -> None:
        pod.gone = t
        job = self.jobs[pod.job]
        if job.finished or pod.bound is None or pod.succeeded is not None:
            return
        if pod.deleting is None:  # deleted between two looks: leaving and gone at once
            pod.deleting = t
            pod.gone = None
            self._leaving(job, pod, t)
            pod.gone = t
        self.timeline.add(Occurrence(t, "release", job.name, tasks=1))
        self._progress(job, t)

    def _succeeded(self, job: _Job, t: float) -> None:
        if job.finished:
            return
        self.flush(job, force=True)
        job.finished = True
        self.timeline.add(Occurrence(t, "finish", job.name))
        if not self.mode.controller:
            with contextlib.suppress(Exception):  # its pending replicas go with it
                self.custom.delete_namespaced_custom_object(
                    "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", job.name
                )

    def flush(self, job: _Job, force: bool = False, now: float | None = None) -> None:
        """Close the job's open eviction group once its window has passed."""
        if job.evicting is None:
            return
        first, tasks, lost = job.evicting
        if force or now is None or now - first >= EVICTION_WINDOW:
            self.timeline.add(Occurrence(first, "evict", job.name, tasks=tasks, lost=lost))
            job.evicting = None

    def _annotate(self, pod: _Pod, annotations: dict[str, str]) -> None:
        try:
            self.core.patch_namespaced_pod(
                pod.name, NAMESPACE, {"metadata": {"annotations": annotations}}
            )
        except Exception as error:  # gone meanwhile: nothing left to pace
            if getattr(error, "status", None) != 404:
                self.notes.append(f"patch {pod.name}: {error.__class__.__name__}")

    # -- the run ----------------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> None:
        submissions = sorted(
            (s.spec for s in self.scenario.submissions if s.invalid is None),
            key=lambda s: (s.submit, s.id),
        )
        for submission in self.scenario.submissions:
            if submission.invalid is not None:
                self.notes.append(f"{submission.spec.name}: not submitted ({submission.invalid})")
        end = self.scenario.until
        if end is None:
            last = max((s.submit for s in submissions), default=0.0)
            end = last + max((s.duration or 0.0) for s in submissions) * 4 + 60
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        watcher = threading.Thread(target=self.watch, name="replay-watch", daemon=True)
        watcher.start()
        pending = list(reversed(submissions))
        last_tick = 0.0
        try:
            while True:
                now = self.now()
                if now >= end:
                    break
                while pending and pending[-1].submit <= now:
                    self.submit(pending.pop())
                timeout = min(0.1, max(end - now, 0.0))
                if pending:
                    timeout = min(timeout, max(pending[-1].submit - now, 0.0))
                with contextlib.suppress(queue_mod.Empty):
                    kind, t, payload = self.events.get(timeout=max(timeout, 0.001))
                    self.handle(kind, t, payload)
                    while True:  # drain what arrived meanwhile
                        kind, t, payload = self.events.get_nowait()
                        self.handle(kind, t, payload)
                now = self.now()
                for job in self.jobs.values():
                    self.flush(job, now=now)
                if progress is not None and now - last_tick >= 1.0:
                    progress(now / end)
                    last_tick = now
                if self.controller is not None and self.controller.poll() is not None:
                    raise RuntimeError("replay: caldera's controller exited during the run")
                # Every job ended: the run is over, `until` or not — the simulator stops at
                # its last event too, and measures up to it.
                if not pending and all(j.finished for j in self.jobs.values()):
                    self.timeline.end = now
                    break
        finally:
            self.stop.set()
            for job in self.jobs.values():
                self.flush(job, force=True)

    def close(self) -> None:
        self.stop.set()
        self.stop_controller()
        with contextlib.suppress(Exception):
            self.api.close()


def _quota(resources: Any, gpu_always: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resources.gpu or gpu_always:
        out["gpu"] = resources.gpu / GPU_MILLI
    if resources.cpu:
        out["cpu"] = f"{resources.cpu}m"
    if resources.memory:
        out["memory"] = f"{resources.memory}Mi"
    return out


def _queue_model(queue: Queue) -> dict[str, Any]:
    """A queue as the configuration file writes it (caldera.config.schema.QueueModel)."""
    out: dict[str, Any] = {
        "name": queue.name,
        "weight": queue.weight,
        "reclaimable": queue.reclaimable,
        "critical_allowed": queue.critical_allowed,
        "state": queue.state.value,
    }
    if queue.deserved is not None:
        out["deserved"] = _quota(queue.deserved, gpu_always=True)
    if queue.guarantee is not None:
        out["guarantee"] = _quota(queue.guarantee)
    if queue.capability is not None:
        out["capability"] = _quota(queue.capability)
    return out


@contextlib.contextmanager
def _cluster(
    scenario: Scenario, mode: Mode, volcano: VolcanoBins | None, bins: Path | None, period: float
) -> Iterator[DevCluster]:
    folder = Path(tempfile.mkdtemp(prefix=f"caldera-replay-{mode.key}-"))
    conf = SEED_001 if mode.key == "volcano" else VOLCANO_FOR_CALDERA
    cluster = DevCluster(
        folder=folder,
        bins=bins,
        nodes=ScenarioNodes(scenario.nodes),
        volcano=volcano if mode.needs_volcano else None,
        volcano_conf=conf,
        volcano_period=period,
        start_timeout=180.0,
    )
    cluster._owns_folder = not os.environ.get("CALDERA_REPLAY_KEEP")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def replay(
    scenario: Scenario,
    mode: Mode,
    factor: float,
    volcano: VolcanoBins | None = None,
    bins: Path | None = None,
    progress: Callable[[float], None] | None = None,
    log: Callable[[str], None] = lambda line: None,
    volcano_period: float = 1.0,
) -> KubeRun:
    """Replay `scenario` compressed `factor` times under `mode` on a fresh dev cluster."""
    if mode.needs_volcano and volcano is None:
        raise ValueError(f"mode {mode.key} needs the real Volcano (make cluster-bins)")
    began = time.monotonic()
    with _cluster(scenario, mode, volcano, bins, volcano_period) as cluster:
        assert cluster.folder is not None
        run = _Replay(scenario, mode, factor, cluster, log)
        try:
            run.setup(cluster.folder)
            run.run(progress)
        finally:
            run.close()
    result = run.timeline.result(mode.label, factor)
    series = result.pop("series")
    skew = sorted(abs(s) for s in run.skew)
    return KubeRun(
        mode=mode,
        result=result,
        series=series,
        wall_seconds=time.monotonic() - began,
        skew={
            "samples": float(len(skew)),
            "max": round(skew[-1], 3) if skew else 0.0,
            "mean": round(sum(skew) / len(skew), 3) if skew else 0.0,
        },
        start_order=run.start_order,
        victims=run.victims,
        notes=run.notes,
    )
