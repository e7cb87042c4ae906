"""Replay a (compressed) scenario on a real control plane and measure it from the API server.

One `replay(...)` call starts a dev cluster with the scenario's nodes as KWOK nodes
(caldera.devcluster), sets it up for the mode (caldera.replay.prepare, caldera.replay.modes),
submits the jobs at their (compressed) times as each runtime's users would
(caldera.replay.manifests), follows every pod through one watch stream (caldera.replay.watch),
and hands what it sees to a `PodFollower` (caldera.replay.pods), which feeds a `Timeline`
(caldera.replay.measure) and plays the jobs' part that KWOK does not run.

Times are when the watch event arrived, on this process's monotonic clock, from the moment the
first job could be submitted (sub-second; the API server's own timestamps have whole seconds:
`creationTimestamp`, the PodScheduled condition written by the binding, `deletionTimestamp`).
Both are kept, and `KubeRun.skew` says how far they disagree.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes

from caldera.config import Scenario
from caldera.devcluster import DevCluster, ScenarioNodes
from caldera.devcluster.volcano import SEED_001, VOLCANO_FOR_CALDERA, VolcanoBins
from caldera.k8s.cluster.client import load_api_client
from caldera.model import GPU_MILLI, JobSpec
from caldera.replay.api import NAMESPACE, retrying
from caldera.replay.compress import compress
from caldera.replay.controller import stop_controller
from caldera.replay.manifests import caldera_job, k8s_names, volcano_job
from caldera.replay.measure import Occurrence, Timeline
from caldera.replay.modes import Mode
from caldera.replay.pods import PodFollower, submit_annotations
from caldera.replay.prepare import prepare
from caldera.replay.watch import Event, watch_pods
from caldera.trainingjob_api import GROUP, PLURAL, VERSION

__all__ = ["KubeRun", "replay"]

k8s: Any = kubernetes


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
        self.specs = [s.spec for s in self.scenario.submissions if s.invalid is None]
        self.names = k8s_names(self.specs)
        capacity = sum(n.gpus for n in scenario.nodes) * GPU_MILLI
        self.timeline = Timeline(
            {self.names[s.id]: s for s in self.specs},
            capacity,
            scenario.with_policy(mode.policy).config.slo,
            self.scenario.warmup,
            self.scenario.until,
        )
        self.events: queue_mod.Queue[Event] = queue_mod.Queue()
        self.stop = threading.Event()
        self.api = load_api_client(str(cluster.kubeconfig()))
        self.core = k8s.client.CoreV1Api(self.api)
        self.custom = k8s.client.CustomObjectsApi(self.api)
        self.t0 = 0.0
        self.wall0 = 0.0
        self.controller: subprocess.Popen[bytes] | None = None
        self.notes: list[str] = []
        self.pods = PodFollower(
            self.specs,
            self.names,
            self.timeline,
            self.config,
            mode.controller,
            self.core,
            self.custom,
            self.wall,
            self.notes,
        )

    # -- clock ------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def wall(self, t: float) -> float:
        return self.wall0 + t

    # -- set-up and submissions -------------------------------------------------------------

    def setup(self, folder: Path) -> None:
        self.controller = prepare(
            self.api, self.scenario, self.specs, self.mode, self.cluster.kubeconfig(), folder
        )

    def submit(self, spec: JobSpec) -> None:
        name = self.names[spec.id]
        annotations = submit_annotations(spec, self.config)
        if self.mode.controller:
            body = caldera_job(spec, name, NAMESPACE, annotations)
            retrying(
                lambda: self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, body
                ),
                name,
            )
        else:
            grace = int(self.config.grace_period)
            body = volcano_job(spec, name, NAMESPACE, grace, annotations)
            retrying(
                lambda: self.custom.create_namespaced_custom_object(
                    "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", body
                ),
                name,
            )
        self.timeline.add(Occurrence(self.now(), "submit", name))

    # -- the run ----------------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> None:
        submissions = sorted(self.specs, key=lambda s: (s.submit, s.id))
        for submission in self.scenario.submissions:
            if submission.invalid is not None:
                self.notes.append(f"{submission.spec.name}: not submitted ({submission.invalid})")
        end = self.scenario.until
        if end is None:
            last = max((s.submit for s in submissions), default=0.0)
            end = last + max((s.duration or 0.0) for s in submissions) * 4 + 60
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        watcher = threading.Thread(
            target=watch_pods,
            args=(self.core, self.events, self.stop, self.now),
            name="replay-watch",
            daemon=True,
        )
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
                    self.pods.handle(kind, t, payload)
                    while True:  # drain what arrived meanwhile
                        kind, t, payload = self.events.get_nowait()
                        self.pods.handle(kind, t, payload)
                now = self.now()
                self.pods.flush_all(now=now)
                if progress is not None and now - last_tick >= 1.0:
                    progress(now / end)
                    last_tick = now
                if self.controller is not None and self.controller.poll() is not None:
                    raise RuntimeError("replay: caldera's controller exited during the run")
                # Every job ended: the run is over, `until` or not — the simulator stops at
                # its last event too, and measures up to it.
                if not pending and self.pods.all_finished():
                    self.timeline.end = now
                    break
        finally:
            self.stop.set()
            self.pods.flush_all(force=True)

    def close(self) -> None:
        self.stop.set()
        stop_controller(self.controller)
        with contextlib.suppress(Exception):
            self.api.close()


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
    skew = sorted(abs(s) for s in run.pods.skew)
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
        start_order=run.pods.start_order,
        victims=run.pods.victims,
        notes=run.notes,
    )
