"""What a replay sees of its pods, and the part the jobs play on a cluster where nothing runs.

The watch (caldera.replay.watch) hands every pod event here. From them a `PodFollower` feeds
the replay's `Timeline` (caldera.replay.measure):

    pod bound (spec.nodeName set)          → the task holds its GPUs; the job starts once
                                             `min_available` of its tasks are bound
    deletion requested (deletionTimestamp) → an eviction (pods of one job deleted within one
                                             second form one eviction), the task is releasing
    pod gone (DELETED)                     → its GPUs are free
    pod Succeeded                          → the job finished

and plays the training processes KWOK does not run, as the simulator assumes jobs behave:
- a job makes progress while at least `min_available` of its pods are bound and not leaving;
  it then finishes at `duration − saved work` from that moment: every running pod of it gets
  `caldera.io/kwok-succeed-at` (KWOK's stage completes the pod then);
- when an eviction takes it below `min_available` it stops: the work since its last save is
  lost (`checkpoint.interval`, or none at all when it checkpoints on SIGTERM and the policy
  lets it, `PolicyConfig.emergency_checkpoint`), the pods left keep their GPUs but make no
  progress (gang hang: their finish time moves far ahead) until the gang is whole again;
- a job that checkpoints on SIGTERM exits `checkpoint.cost` seconds after it (KWOK's
  `caldera.io/kwok-exit-after-term`, written at submission: `submit_annotations`) and reports
  the checkpoint on its pod for caldera's controller (`caldera.io/checkpoint`).

Apart from the replay's run loop because this is the model of a job, which changes with what
the simulator assumes; the loop changes with how a replay is paced and stopped.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from caldera.core import PolicyConfig
from caldera.core.decisions import release_timing
from caldera.model import GPU_MILLI, JobSpec
from caldera.replay.api import NAMESPACE, parse_time, rfc3339
from caldera.replay.manifests import REPLAY_JOB
from caldera.replay.measure import Occurrence, Timeline
from caldera.trainingjob_api import CHECKPOINT, JOB

__all__ = ["EVICTION_WINDOW", "PodFollower", "submit_annotations"]

FAR = "2100-01-01T00:00:00Z"  # a paused pod's finish: long after any replay
EVICTION_WINDOW = 1.0  # seconds: deletions of one job's pods this close are one eviction


def submit_annotations(spec: JobSpec, config: PolicyConfig) -> dict[str, str]:
    """What a job's pods carry from the start: a job that saves its work on SIGTERM within
    the grace period exits once the checkpoint is written."""
    _, saves = release_timing(spec, config)
    if saves:
        return {"caldera.io/kwok-exit-after-term": f"{spec.checkpoint.cost:.3f}"}
    return {}


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


class PodFollower:
    """Every pod of one replay, by uid, and the jobs they belong to (by Kubernetes name).

    `core`, `custom`: the API clients it writes the jobs' part with; `wall(t)`: the Unix time
    of replay time `t` (what KWOK's annotations and the API server's timestamps speak);
    `controller`: caldera's controller runs (it reads the checkpoint reports; without it the
    users' Volcano Jobs are deleted when they finish). `notes` gathers what went wrong.
    """

    def __init__(
        self,
        specs: Sequence[JobSpec],
        names: Mapping[str, str],
        timeline: Timeline,
        config: PolicyConfig,
        controller: bool,
        core: Any,
        custom: Any,
        wall: Callable[[float], float],
        notes: list[str],
    ) -> None:
        self.jobs = {names[s.id]: _Job(s, names[s.id]) for s in specs}
        self.timeline = timeline
        self.config = config
        self.controller = controller
        self.core = core
        self.custom = custom
        self.wall = wall
        self.notes = notes
        self.pods: dict[str, _Pod] = {}
        self.skew: list[float] = []  # watch time − API server time, per bind and deletion
        self.start_order: list[str] = []
        self.victims: list[str] = []

    def all_finished(self) -> bool:
        return all(job.finished for job in self.jobs.values())

    def flush_all(self, now: float | None = None, force: bool = False) -> None:
        for job in self.jobs.values():
            self.flush(job, force=force, now=now)

    # -- what the pods show -----------------------------------------------------------------

    def handle(self, kind: str, t: float, payload: Any) -> None:
        """One event of the watch: `LIST` (every pod, after a (re)list), `DELETED`, another
        watch event type, or `NOTE` (the watch's own trouble)."""
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
                    pod.api_bound = parse_time(condition.get("lastTransitionTime"))
            self._bound(job, pod, t)
        if meta.get("deletionTimestamp") and pod.deleting is None:
            pod.deleting = t
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            deletion = parse_time(meta["deletionTimestamp"])
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
            at = rfc3339(self.wall(job.finish_at))
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
            _, emergency = release_timing(spec, self.config)
            saved = work if emergency else spec.checkpoint.resume_point(work, job.saved)
            held = (len(staying) + 1) * spec.gpu / GPU_MILLI
            lost = held * max(work - saved, 0.0)
            job.saved = saved
            job.progressing = False
            job.finish_at = None
            for other in staying:  # the gang hangs: what is left makes no progress
                self._annotate(other, {"caldera.io/kwok-succeed-at": FAR})
                other.finish_at = FAR
            if emergency and self.controller:
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
        if not self.controller:
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
