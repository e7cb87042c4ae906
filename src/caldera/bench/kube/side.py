"""`caldera bench k8s --modes …`: the same workload through each runtime, side by side (issue 40).

For each mode, one after the other, a fresh dev cluster of the same size (`nodes` KWOK nodes of
`gpus_per_node` GPUs; the real Volcano where the mode needs it) takes the same workload: `pods`
pods of `gpus_per_pod` GPUs, a `gang_share` of them in gangs of 8–64 tasks (all or nothing),
the rest single-pod jobs, in one seeded order, created `submitters` clients at a time. Every
pod fits at once: the bench measures how fast a runtime starts what it can start, not a queue.

What each mode submits, as its users would:

- `kube-scheduler`: plain pods (a gang's pods too: kube-scheduler knows no gangs);
- `volcano`: a PodGroup per job (`minMember`: its size, queue `bench`) and its pods with
  `schedulerName: volcano`, bound by the real vc-scheduler (seed 001's configuration);
- `volcano-job`: a Volcano Job per job (`batch.volcano.sh/v1alpha1`, one task of the job's
  size, `minAvailable` all of it, queue `bench`; `workload.volcano_job`), as Volcano's users
  submit: vc-controller-manager's job controller creates its PodGroup and its pods (once
  vc-scheduler has let the PodGroup in), the same vc-scheduler binds them;
- `caldera`: a TrainingJob per job, applied to caldera's controller (`caldera k8s run`, its own
  process, leader election on), which creates the pods; kube-scheduler binds them;
- `caldera-volcano`: the same controller in front of the real vc-scheduler
  (`VOLCANO_FOR_CALDERA`, as docs/kubernetes.md configures it).

What is measured, per mode, from one watch on the namespace's pods (local arrival times):

- pods bound per second: pods over the time from the first submission to the last pod bound;
- submission → bind p50/p99: from the moment the client sent its job's first object to the
  first sight of the pod bound (`spec.nodeName`);
- API requests per started pod: the API server's own `apiserver_request_total` (every client:
  the bench's creates and watch, the schedulers, the controllers) read off `/metrics` before
  the first submission and once the writes have settled after the last bind (`settle_s`),
  divided by the pods; writes (POST, PUT, PATCH, DELETE, APPLY) apart. The Leases and node
  heartbeats (`leases`, `nodes/status`, `nodes`) grow with time, not with pods, and the
  non-resource URLs (`/metrics` itself) are the bench's: they are counted in `background`,
  not per pod;
- CPU seconds of each process of the dev cluster and of caldera's controller over the same
  window (`/proc/PID/stat`), and each one's peak RSS (`VmHWM`); the machine's load average at
  both ends of the window (other users of a shared machine).

In the caldera modes, also (issue 40, items 1 and 2):

- the controller's writes per job (`controller_writes_per_job`; for single-pod jobs, its
  writes per start): from the same counts, the writes only the controller makes there (its
  pods' creates and deletes, evictions, the TrainingJobs' status patches, PodGroups,
  Services, its state ConfigMap) and the Events beyond those of the mode behind it in the
  same run (kube-scheduler's, KWOK's, Volcano's own Events are in both);
- writes per single-pod job: its pod (and PodGroup, in front of Volcano) and each change of
  its TrainingJob the bench's watch saw (its status patches), the mean and how many jobs took
  how many;
- admission: from the moment a TrainingJob was sent to the first sight of its status (the
  controller admitted it), p50/p99 over the jobs sent in the middle third of the submissions
  (in the thick of the burst) and p99 over all;
- decision → bind: from the start decision (the status's `controller.start_time`, the
  controller's clock, this machine's) to the first sight of each of its pods bound.

And the ratios of pods bound per second: caldera + Volcano / Volcano alone and caldera /
kube-scheduler, when both of a pair ran.

The preemption-heavy case (`fill`, issue 40 item 3): before the measured workload, `fill`
single-pod jobs of low priority take every GPU of the cluster (submitted and bound first,
not measured); then the measured jobs — gangs (`gang_sizes`) — come at high priority, so
every start needs victims. Each mode as its users would: PriorityClasses `bench-low` and
`bench-high` on the plain pods (kube-scheduler's preemption) and on the PodGroups and pods,
or the Volcano Jobs and their pod templates (Volcano's preempt action); TrainingJobs of type
`normal` and `large-job` for caldera (its preemption, through the Eviction API, grace period
1 s, no cooldown). Besides the figures above (over the gangs' pods), the victims: pods seen
deleted or being deleted in the window (through the Eviction API for caldera, `POST
pods/eviction`; kube-scheduler and Volcano delete them), per second from the first gang sent
to the last gang pod bound. Victims are counted by pod name: Volcano's job controller creates
a filler's pod again under the same name (pending: no room), so a filler evicted twice counts
once in `volcano-job`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes

from caldera.bench.kube.cluster import (
    QUEUE,
    SUBMITTERS,
    bench_cluster,
    garbage_collector_knows,
    install_training_jobs,
    start_controller,
    stop_controller,
    untainted,
    write_config,
)
from caldera.bench.kube.counts import (
    BEHIND,
    background,
    controller_writes,
    is_write,
    per_pod,
    ratios,
)
from caldera.bench.kube.measure import (
    cpu,
    cpu_and_rss,
    events_by_reason,
    percentile,
    server_requests,
    wait_for,
)
from caldera.bench.kube.watch import NAMESPACE, PodWatch
from caldera.bench.kube.workload import (
    HIGH,
    LOW,
    PRIORITY,
    SideMode,
    gang_sizes,
    submit,
    workload,
)
from caldera.devcluster import DevCluster
from caldera.devcluster.errors import DevClusterError
from caldera.devcluster.volcano import SEED_001, VOLCANO_FOR_CALDERA, VolcanoBins
from caldera.k8s.cluster.api import ClusterError
from caldera.k8s.cluster.client import KubeClusterAPI, load_api_client

__all__ = ["SideResult", "bench_side_by_side"]

k8s: Any = kubernetes
SETTLE_STEP = 2.0  # seconds between two looks at the API server's counts after the last bind
SETTLE_MAX = 60.0  # seconds at most waited for the writes to settle
SETTLED = 2  # workload writes per SETTLE_STEP at or below which the writes have settled
PROGRESS_EVERY = 10.0  # seconds between two progress lines
# caldera's policy in the preemption case: victims leave at once (KWOK pods hold no work)
PREEMPT_POLICY = {"grace_period": 1, "cooldown": 0, "eviction_budget": 1.0}


@dataclass
class SideResult:
    mode: str
    nodes: int
    gpus_per_node: int
    pods: int
    jobs: int
    gangs: int
    bound: int = 0
    error: str = ""  # why the mode did not finish (what was measured stays)
    cluster_start_s: float = 0.0
    submitted_s: float = 0.0  # from the first submission to the last one answered
    all_bound_s: float = 0.0
    pods_per_s: float = 0.0
    bind_p50_s: float = 0.0
    bind_p99_s: float = 0.0
    settle_s: float = 0.0  # from the last bind until the writes settled (end of the window)
    requests_per_pod: float = 0.0
    writes_per_pod: float = 0.0
    server_requests: dict[str, int] = field(default_factory=dict)  # by `VERB resource`
    background: dict[str, int] = field(default_factory=dict)  # leases, heartbeats, /metrics
    cpu_s: dict[str, float] = field(default_factory=dict)  # by process, over the window
    # the cluster's Events at the end, by `component reason` (fillers' included)
    events: dict[str, int] = field(default_factory=dict)
    rss_mib: dict[str, float] = field(default_factory=dict)  # peak, by process
    # the machine's 1-minute load average at the first submission and at the end: other
    # users of a shared machine show here
    load: tuple[float, float] = (0.0, 0.0)
    # caldera modes only (see the module's docstring)
    controller_writes: dict[str, int] = field(default_factory=dict)
    controller_writes_per_job: float = 0.0
    admit_p50_s: float = 0.0  # jobs sent in the middle third of the submissions
    admit_p99_s: float = 0.0
    admit_all_p99_s: float = 0.0
    # admission's two parts, the same middle third, p50/p99: sent → the TrainingJob first
    # seen by the bench's watch (the API server's create) and first seen → status seen (the
    # controller's share; both sightings through the same watch)
    admit_create_s: tuple[float, float] = (0.0, 0.0)
    admit_controller_s: tuple[float, float] = (0.0, 0.0)
    # the controller's writes per single-pod job, from the TrainingJobs' watch: its pod and
    # each change of the TrainingJob seen (status patches); the mean, and how many jobs
    # took how many writes
    single_pod_writes: float = 0.0
    single_pod_writes_spread: dict[int, int] = field(default_factory=dict)
    decision_bind_p50_s: float = 0.0
    decision_bind_p99_s: float = 0.0
    # the preemption case: fillers bound before the measured jobs, and the evictions
    fill: int = 0
    fill_s: float = 0.0
    evictions: int = 0
    evictions_per_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _queue_open(custom: Any) -> bool:
    with contextlib.suppress(k8s.client.ApiException):
        queue = custom.get_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", QUEUE
        )
        return bool((queue.get("status") or {}).get("state") == "Open")
    return False


def _prepare(
    api: Any,
    cluster: DevCluster,
    mode: SideMode,
    folder: Path,
    started: list[subprocess.Popen[bytes]],
    preempt: bool = False,
) -> subprocess.Popen[bytes] | None:
    """The namespace, and what the mode needs before its users submit: Volcano's queue, or
    the TrainingJob CRD and caldera's controller (leading; put in `started` as soon as it
    runs, so that a wait that fails still ends it)."""
    core = k8s.client.CoreV1Api(api)
    custom = k8s.client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    wait_for(
        "the namespace's default service account",
        lambda: any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account(NAMESPACE).items
        ),
        60,
    )
    if mode.volcano_alone:
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": QUEUE},
            "spec": {"weight": 1, "reclaimable": True},
        }
        custom.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", queue)
    if preempt and not mode.controller:
        scheduling = k8s.client.SchedulingV1Api(api)
        for name, value in PRIORITY.items():
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    if not mode.controller:
        if mode.needs_volcano:
            wait_for("Volcano to open the queue", lambda: _queue_open(custom), 120)
        return None
    installed = install_training_jobs(api)
    config = write_config(folder, mode.scheduler_name, PREEMPT_POLICY if preempt else None)
    log = folder / "controller.log"
    controller = start_controller(cluster, config, log)
    started.append(controller)

    def leading() -> bool:
        if controller.poll() is not None:
            tail = log.read_text(errors="replace")[-400:]
            raise RuntimeError(f"bench k8s: caldera's controller exited: {tail}")
        return "controller running" in log.read_text(errors="replace")

    wait_for("the controller to lead", leading, 120)
    if mode.needs_volcano:
        wait_for("Volcano to open caldera's queue", lambda: _queue_open(custom), 120)
    garbage_collector_knows(installed)
    return controller


def _settle(api: Any, last: dict[str, int]) -> dict[str, int]:
    """The API server's counts once the workload's writes have stopped (at most SETTLE_MAX):
    caldera writes a started job's status after its pods are bound."""
    deadline = time.monotonic() + SETTLE_MAX
    while time.monotonic() < deadline:
        time.sleep(SETTLE_STEP)
        now = server_requests(api)
        grown = sum(n - last.get(k, 0) for k, n in now.items() if is_write(k) and not background(k))
        last = now
        if grown <= SETTLED:
            break
    return last


def _said(error: BaseException) -> str:
    """An error in one line (an API error with its status, reason and message)."""
    if isinstance(error, k8s.client.ApiException):
        message = ""
        with contextlib.suppress(ValueError, TypeError):
            message = str(json.loads(error.body).get("message", ""))
        return f"the API server answered {error.status} {error.reason}: {message}"[:300]
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _run_mode(
    mode: SideMode,
    sizes: Sequence[int],
    result: SideResult,
    gpus: int,
    volcano: VolcanoBins | None,
    submitters: int,
    timeout: float,
    say: Callable[[str], None],
    fill: int = 0,
    logs: Path | None = None,
    volcano_flags: Sequence[str] = (),
) -> None:
    pods = sum(sizes)
    with tempfile.TemporaryDirectory(prefix=f"caldera-bench-{mode.value}-") as tmp:
        folder = Path(tmp)
        cluster = bench_cluster(
            folder,
            result.nodes,
            result.gpus_per_node,
            volcano=volcano if mode.needs_volcano else None,
            volcano_conf=SEED_001 if mode.volcano_alone else VOLCANO_FOR_CALDERA,
            volcano_controller_flags=volcano_flags,
        )
        began = time.monotonic()
        cluster.start()
        api = load_api_client(str(cluster.kubeconfig()))
        untainted(api, cluster.start_timeout)
        result.cluster_start_s = round(time.monotonic() - began, 1)
        say(f"{mode.value}: cluster of {result.nodes} nodes up in {result.cluster_start_s:.0f} s")
        watch = PodWatch(KubeClusterAPI(api))
        jobs = PodWatch(KubeClusterAPI(api), kind="trainingjobs")
        started: list[subprocess.Popen[bytes]] = []
        try:
            controller = _prepare(api, cluster, mode, folder, started, preempt=fill > 0)
            threading.Thread(target=watch.run, daemon=True).start()
            if mode.controller:
                threading.Thread(target=jobs.run, daemon=True).start()
            pids = dict(cluster.pids)
            if controller is not None:
                pids["caldera-controller"] = controller.pid
            if fill:
                result.fill = fill
                result.fill_s = _fill(api, mode, fill, gpus, submitters, watch, timeout, say)

            def bound() -> list[float]:
                """When each pod of the measured jobs was first seen bound."""
                if not fill:
                    return list(watch.bound.values())
                return [
                    t for pod, t in list(watch.bound.items()) if watch.job_of[pod][:4] == "job-"
                ]

            cpu_before, requests_before = cpu(pids), server_requests(api)
            gone_before = len(watch.gone)
            load_before = os.getloadavg()[0]
            first = time.monotonic()
            sent: dict[str, float] = {}
            failed: list[BaseException] = []

            def submit_all() -> None:
                try:
                    submit(
                        api, mode, sizes, gpus, submitters, sent, priority=HIGH if fill else None
                    )
                except Exception as error:  # said as the mode's error below
                    failed.append(error)
                result.submitted_s = round(time.monotonic() - first, 2)

            submitting = threading.Thread(target=submit_all, daemon=True)
            submitting.start()
            next_line = first + PROGRESS_EVERY
            while (done := len(bound())) < pods:
                now = time.monotonic()
                if now - first > timeout:
                    raise TimeoutError(f"{done} of {pods} pods bound after {timeout:g} s")
                if now >= next_line:
                    say(f"{mode.value}: {done}/{pods} pods bound, {now - first:.0f} s")
                    next_line = now + PROGRESS_EVERY
                if failed:
                    raise RuntimeError(f"submitting: {_said(failed[0])}")
                time.sleep(0.2)
            submitting.join(timeout)
            last_bind = max(bound())
            requests_after = _settle(api, requests_before)
            result.settle_s = round(time.monotonic() - last_bind, 1)
            cpu_after = cpu(pids)
            result.load = (round(load_before, 1), round(os.getloadavg()[0], 1))
            result.bound = len(bound())
            result.all_bound_s = round(last_bind - first, 2)
            result.pods_per_s = round(pods / max(result.all_bound_s, 1e-3), 1)
            delays = [
                t - sent[watch.job_of[pod]]
                for pod, t in watch.bound.items()
                if watch.job_of.get(pod) in sent
            ]
            result.bind_p50_s, result.bind_p99_s = _p50_p99(delays)
            if mode.controller:
                _admission(result, sizes, sent, watch, jobs, 2 if mode.needs_volcano else 1)
            grown = {
                k: n - requests_before.get(k, 0)
                for k, n in requests_after.items()
                if n - requests_before.get(k, 0)
            }
            result.server_requests = dict(sorted(grown.items(), key=lambda kv: -kv[1]))
            result.background = {k: n for k, n in result.server_requests.items() if background(k)}
            result.requests_per_pod, result.writes_per_pod = per_pod(grown, pods)
            result.evictions = len(watch.gone) - gone_before
            result.evictions_per_s = round(result.evictions / max(result.all_bound_s, 1e-3), 1)
            result.cpu_s = {
                k: round(v - cpu_before.get(k, 0.0), 2) for k, v in sorted(cpu_after.items())
            }
            for name, pid in pids.items():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    result.rss_mib[name] = round(cpu_and_rss(pid)[1], 1)
            with contextlib.suppress(kubernetes.client.ApiException):
                result.events = events_by_reason(api)
            say(
                f"{mode.value}: {pods} pods bound in {result.all_bound_s:.1f} s "
                f"({result.pods_per_s:.1f}/s)"
            )
        finally:
            watch.stop.set()
            jobs.stop.set()
            for controller in started:
                stop_controller(controller)
            api.close()
            cluster.stop()
            if logs is not None and (folder / "controller.log").exists():
                logs.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / "controller.log", logs / f"{mode.value}-controller.log")


def _fill(
    api: Any,
    mode: SideMode,
    fill: int,
    gpus: int,
    submitters: int,
    watch: PodWatch,
    timeout: float,
    say: Callable[[str], None],
) -> float:
    """The preemption case's fillers: `fill` single-pod jobs of low priority, submitted and
    bound before the measured jobs (seconds it took)."""
    began = time.monotonic()
    submit(api, mode, [1] * fill, gpus, submitters, {}, prefix="fill", priority=LOW)

    def filled() -> bool:
        done = sum(1 for job in list(watch.job_of.values()) if job[:5] == "fill-")
        bound = sum(1 for pod in list(watch.bound) if watch.job_of[pod][:5] == "fill-")
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{bound} of {fill} fillers bound ({done} seen) after {timeout:g} s")
        return bound >= fill

    while not filled():
        time.sleep(0.5)
    took = round(time.monotonic() - began, 1)
    say(f"{mode.value}: {fill} fillers bound in {took:.0f} s; the gangs come now")
    return took


def _p50_p99(values: list[float]) -> tuple[float, float]:
    return round(percentile(values, 0.50), 2), round(percentile(values, 0.99), 2)


def _admission(
    result: SideResult,
    sizes: Sequence[int],
    sent: dict[str, float],
    pods: PodWatch,
    jobs: PodWatch,
    objects: int = 1,
) -> None:
    """Admission (sent → status first seen), decision → bind and the writes per single-pod
    job (`objects` created for each: its pod, and its PodGroup in front of Volcano), for a
    caldera mode."""
    names_in_order = [f"job-{i:05d}" for i in range(len(sizes))]
    third = len(names_in_order) // 3
    middle = names_in_order[third : len(names_in_order) - third] or names_in_order
    waits = {n: jobs.admitted[n] - sent[n] for n in names_in_order if n in jobs.admitted}
    mid = [waits[n] for n in middle if n in waits]
    result.admit_p50_s, result.admit_p99_s = _p50_p99(mid)
    result.admit_all_p99_s = round(percentile(list(waits.values()), 0.99), 2)
    seen = [n for n in middle if n in jobs.seen]
    create = [jobs.seen[n] - sent[n] for n in seen]
    controller = [jobs.admitted[n] - jobs.seen[n] for n in seen if n in jobs.admitted]
    result.admit_create_s = _p50_p99(create)
    result.admit_controller_s = _p50_p99(controller)
    singles = [n for n, size in zip(names_in_order, sizes, strict=True) if size == 1]
    writes = [objects + jobs.changes.get(n, 0) for n in singles if n in jobs.decided]
    result.single_pod_writes = round(sum(writes) / max(len(writes), 1), 2)
    result.single_pod_writes_spread = dict(sorted(Counter(writes).items()))
    to_bind = [
        t - jobs.decided[pods.job_of[pod]]
        for pod, t in pods.bound_wall.items()
        if pods.job_of.get(pod) in jobs.decided
    ]
    result.decision_bind_p50_s, result.decision_bind_p99_s = _p50_p99(to_bind)


def bench_side_by_side(
    modes: Sequence[SideMode],
    nodes: int,
    gpus_per_node: int,
    pods: int,
    gpus_per_pod: int = 1,
    gang_share: float = 0.2,
    seed: int = 1,
    volcano: VolcanoBins | None = None,
    submitters: int = SUBMITTERS,
    timeout: float = 900.0,
    say: Callable[[str], None] = lambda line: None,
    gangs: int = 0,
    logs: Path | None = None,
    volcano_flags: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the workload through each mode on its own fresh dev cluster, one after the other.
    A mode that fails (a timeout, a component that died) keeps what it measured and says why
    in `error`; the next mode still runs. `gangs` > 0: the preemption case — the cluster
    filled with low-priority single-pod jobs first, then `gangs` gangs (`gang_sizes`) at high
    priority (`pods` and `gang_share` are then not used). `logs`: a folder that keeps each
    caldera mode's controller log (`MODE-controller.log`). `volcano_flags`: more flags for
    vc-controller-manager wherever it runs (its client's rate and job workers: a tuned
    Volcano), in the report as given."""
    sizes = gang_sizes(gangs, seed) if gangs else workload(pods, gang_share, seed)
    fill = nodes * (gpus_per_node // gpus_per_pod) if gangs else 0
    results = []
    for mode in modes:
        result = SideResult(
            mode.value, nodes, gpus_per_node, sum(sizes), len(sizes), sum(1 for s in sizes if s > 1)
        )
        try:
            _run_mode(
                mode, sizes, result, gpus_per_pod, volcano, submitters, timeout, say, fill, logs,
                volcano_flags,
            )  # fmt: skip
        except (
            TimeoutError, RuntimeError, ClusterError, DevClusterError, k8s.client.ApiException
        ) as error:  # fmt: skip
            result.error = _said(error)
            say(f"{mode.value}: {result.error}")
        results.append(result.as_dict())
    by_mode = {r["mode"]: r for r in results}
    for front, behind in BEHIND.items():
        if front in by_mode and behind in by_mode and not by_mode[behind]["error"]:
            r = by_mode[front]
            r["controller_writes"] = controller_writes(
                r["server_requests"], by_mode[behind]["server_requests"]
            )
            r["controller_writes_per_job"] = round(
                sum(r["controller_writes"].values()) / max(r["jobs"], 1), 2
            )
    return {
        "modes": results,
        "volcano_controller_flags": list(volcano_flags),
        "ratios": ratios({r["mode"]: r["pods_per_s"] for r in results if not r["error"]}),
    }
