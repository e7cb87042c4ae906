"""One watch on the bench namespace (pods, or TrainingJobs), stamping what it sees on
arrival: the API server's timestamps have whole seconds only, and the watch reads raw JSON so
that the bench's own parsing stays small beside the controller's. Both benchmarks time their
binds with it (`caldera bench k8s`, and each mode of `--modes`)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from caldera.k8s.cluster.api import ClusterError, from_rfc3339
from caldera.k8s.cluster.client import Expired, KubeClusterAPI
from caldera.trainingjob_api import JOB

__all__ = ["BENCH_JOB", "NAMESPACE", "PodWatch"]

NAMESPACE = "bench"
BENCH_JOB = "bench.caldera.io/job"  # the job a pod the bench creates itself belongs to


@dataclass
class PodWatch:
    """The namespace's pods of a job (caldera's label `JOB`, or `BENCH_JOB` on the pods the
    bench creates for the other runtimes; `label`: a selector to watch fewer): each one's job,
    when it was first seen, first seen bound (`spec.nodeName`) and seen deleted. With
    `kind="trainingjobs"`: when each TrainingJob's status was first seen (admitted) and the
    start the controller decided (`status.controller.start_time`)."""

    api: KubeClusterAPI
    kind: str = "pods"
    label: str = ""
    job_of: dict[str, str] = field(default_factory=dict)
    # pod (or TrainingJob) → first seen (monotonic)
    seen: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)  # pod → first seen bound
    bound_wall: dict[str, float] = field(default_factory=dict)  # the same, in unix time
    admitted: dict[str, float] = field(default_factory=dict)  # TrainingJob → status seen
    decided: dict[str, float] = field(default_factory=dict)  # TrainingJob → its start, unix
    # TrainingJob → changes seen after its creation (new resourceVersions): the controller's
    # writes to it, its status patches (the bench's users never change one)
    changes: dict[str, int] = field(default_factory=dict)
    _versions: dict[str, str] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)  # pods seen deleted or being deleted
    stop: threading.Event = field(default_factory=threading.Event)

    def _note(self, obj: dict[str, Any], now: float, deleted: bool = False) -> None:
        meta = obj["metadata"]
        if self.kind == "trainingjobs":
            name, version = meta["name"], str(meta.get("resourceVersion") or "")
            self.seen.setdefault(name, now)
            if self._versions.setdefault(name, version) != version:
                self.changes[name] = self.changes.get(name, 0) + 1
                self._versions[name] = version
            self._note_job(name, obj.get("status") or {}, now)
            return
        labels = meta.get("labels") or {}
        job = labels.get(BENCH_JOB) or labels.get(JOB)
        if not job:
            return
        name = meta["name"]
        self.job_of.setdefault(name, job)
        self.seen.setdefault(name, now)
        if deleted or "deletionTimestamp" in meta:
            self.gone.add(name)
        if (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
            self.bound[name] = now
            self.bound_wall[name] = time.time()

    def _note_job(self, name: str, status: dict[str, Any], now: float) -> None:
        if status.get("state"):
            self.admitted.setdefault(name, now)
        start = (status.get("controller") or {}).get("start_time")
        if isinstance(start, str) and name not in self.decided:
            with contextlib.suppress(ValueError):
                self.decided[name] = from_rfc3339(start)

    def run(self) -> None:
        """List, then watch from the list's version until `stop` is set; list again after a
        410 Gone, watch again after a dropped connection."""
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    items, version = self.api.list_objects(self.kind, NAMESPACE, self.label)
                    now = time.monotonic()
                    for obj in items:
                        self._note(obj, now)
                watched = self.api.watch_objects(self.kind, NAMESPACE, self.label, "", version, 5)
                for kind, obj in watched:
                    version = str(obj["metadata"].get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        self._note(obj, time.monotonic(), kind == "DELETED")
                    if self.stop.is_set():
                        break
            except Expired:
                version = ""
            except ClusterError:  # a dropped connection: watch again
                time.sleep(0.5)
