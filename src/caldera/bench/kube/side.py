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
`bench-high` on the plain pods (kube-scheduler's preemption) and on the PodGroups and pods
(Volcano's preempt action); TrainingJobs of type `normal` and `large-job` for caldera (its
preemption, through the Eviction API, grace period 1 s, no cooldown). Besides the figures
above (over the gangs' pods), the victims: pods seen deleted or being deleted in the window
(through the Eviction API for caldera, `POST pods/eviction`; kube-scheduler and Volcano
delete them), per second from the first gang sent to the last gang pod bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from caldera.bench.kube.scale import (
    LEASE,
    NODE_GRACE,
    SUBMITTERS,
    _controller,
    _cpu,
    _cpu_and_rss,
    _percentile,
    _server_requests,
    _wait,
)
from caldera.devcluster import DevCluster, NodeShape, find_bins
from caldera.devcluster.errors import DevClusterError
from caldera.devcluster.volcano import SEED_001, VOLCANO_FOR_CALDERA, VolcanoBins
from caldera.k8s import names
from caldera.k8s.api import ClusterError, from_rfc3339
from caldera.k8s.client import Expired, KubeClusterAPI, load_api_client
from caldera.k8s.crd import training_job_crd
from caldera.trainingjob_api import API_VERSION, GROUP, JOB, KIND, PLURAL, VERSION

__all__ = [
    "GANG_MAX",
    "GANG_MIN",
    "SideMode",
    "SideResult",
    "bench_side_by_side",
    "controller_writes",
    "gang_sizes",
    "is_write",
    "per_pod",
    "ratios",
    "workload",
]

k8s: Any = kubernetes
NAMESPACE = "bench"
QUEUE = "bench"
BENCH_JOB = "bench.caldera.io/job"  # the job a pod the bench creates belongs to
IMAGE = "registry.invalid/bench:kwok"
GANG_MIN, GANG_MAX = 8, 64
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
BACKGROUND = frozenset({"leases", "nodes", "nodes/status"})  # grow with time, not with pods
SETTLE_STEP = 2.0  # seconds between two looks at the API server's counts after the last bind
SETTLE_MAX = 60.0  # seconds at most waited for the writes to settle
SETTLED = 2  # workload writes per SETTLE_STEP at or below which the writes have settled
PROGRESS_EVERY = 10.0  # seconds between two progress lines
# What only caldera's controller writes in the caldera modes (Volcano's own PodGroup updates
# are PUTs, KWOK's pod status patches `pods/status`: neither is here). Not `DELETE pods`: KWOK
# deletes every pod that was evicted or deleted with a grace period, once it has "stopped".
CONTROLLER_WRITES = frozenset(
    {
        "POST pods",
        "POST pods/eviction",
        "PATCH trainingjobs/status",
        "POST podgroups",
        "DELETE podgroups",
        "POST services",
        "DELETE services",
        "POST configmaps",
        "PUT configmaps",
        "PATCH configmaps",
    }
)
EVENT_WRITES = ("POST events", "PATCH events")
BEHIND = {"caldera": "kube-scheduler", "caldera-volcano": "volcano"}  # the runtime behind
LOW, HIGH = "bench-low", "bench-high"  # the preemption case's PriorityClasses
PRIORITY = {LOW: 100, HIGH: 100000}
JOB_TYPE = {LOW: "normal", HIGH: "large-job"}  # what caldera's users ask for instead
# caldera's policy in the preemption case: victims leave at once (KWOK pods hold no work)
PREEMPT_POLICY = {"grace_period": 1, "cooldown": 0, "eviction_budget": 1.0}


class SideMode(Enum):
    """A runtime the workload goes through."""

    KUBE_SCHEDULER = "kube-scheduler"
    VOLCANO = "volcano"
    CALDERA = "caldera"
    CALDERA_VOLCANO = "caldera-volcano"

    @property
    def needs_volcano(self) -> bool:
        return self in (SideMode.VOLCANO, SideMode.CALDERA_VOLCANO)

    @property
    def controller(self) -> bool:
        """caldera's controller creates the pods (from TrainingJobs)."""
        return self in (SideMode.CALDERA, SideMode.CALDERA_VOLCANO)

    @property
    def scheduler_name(self) -> str:
        return "volcano" if self.needs_volcano else "default-scheduler"


def workload(pods: int, gang_share: float, seed: int) -> list[int]:
    """The jobs' sizes in submission order: gangs of GANG_MIN..GANG_MAX tasks (never more than
    the gang share has left) until `gang_share` of the pods are in gangs, the rest single-pod
    jobs, shuffled with `seed` so gangs arrive among the singles."""
    rng = random.Random(seed)
    left = int(pods * gang_share)
    sizes: list[int] = []
    while left >= GANG_MIN:
        size = rng.randint(GANG_MIN, min(GANG_MAX, left))
        sizes.append(size)
        left -= size
    sizes += [1] * (pods - sum(sizes))
    rng.shuffle(sizes)
    return sizes


def gang_sizes(gangs: int, seed: int) -> list[int]:
    """`gangs` gang sizes of GANG_MIN..GANG_MAX tasks, seeded: the preemption case's jobs."""
    rng = random.Random(seed)
    return [rng.randint(GANG_MIN, GANG_MAX) for _ in range(gangs)]


def is_write(key: str) -> bool:
    """Whether a `VERB resource` count of the API server is a write."""
    return key.split(" ", 1)[0] in WRITES


def _background(key: str) -> bool:
    resource = key.split(" ", 1)[1] if " " in key else ""
    return not resource or resource in BACKGROUND


def per_pod(requests: dict[str, int], pods: int) -> tuple[float, float]:
    """Requests and writes per started pod, the background left out (see the docstring)."""
    work = {k: n for k, n in requests.items() if not _background(k)}
    total = sum(work.values())
    writes = sum(n for k, n in work.items() if is_write(k))
    return round(total / max(pods, 1), 2), round(writes / max(pods, 1), 2)


def controller_writes(caldera: dict[str, int], behind: dict[str, int]) -> dict[str, int]:
    """The writes of caldera's controller in a caldera mode's counts (`VERB resource`): what
    only it writes there, and its Events — those beyond the count of the mode behind it,
    measured in the same run on the same workload (may be negative by a few: the
    schedulers' own Events vary from run to run)."""
    found = {k: n for k, n in caldera.items() if k in CONTROLLER_WRITES and n}
    for key in EVENT_WRITES:
        extra = caldera.get(key, 0) - behind.get(key, 0)
        if extra:
            found[key] = extra
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def ratios(pods_per_s: dict[str, float]) -> dict[str, float]:
    """caldera + Volcano / Volcano and caldera / kube-scheduler in pods bound per second, for
    each pair that both ran (and bound something)."""
    pairs = {
        "caldera-volcano/volcano": ("caldera-volcano", "volcano"),
        "caldera/kube-scheduler": ("caldera", "kube-scheduler"),
    }
    return {
        name: round(pods_per_s[a] / pods_per_s[b], 3)
        for name, (a, b) in pairs.items()
        if pods_per_s.get(a) and pods_per_s.get(b)
    }


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
    decision_bind_p50_s: float = 0.0
    decision_bind_p99_s: float = 0.0
    # the preemption case: fillers bound before the measured jobs, and the evictions
    fill: int = 0
    fill_s: float = 0.0
    evictions: int = 0
    evictions_per_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Watch:
    """The namespace's pods: each one's job and when it was first seen bound."""

    api: KubeClusterAPI
    kind: str = "pods"
    job_of: dict[str, str] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)  # pod → first seen bound
    bound_wall: dict[str, float] = field(default_factory=dict)  # the same, in unix time
    admitted: dict[str, float] = field(default_factory=dict)  # TrainingJob → status seen
    decided: dict[str, float] = field(default_factory=dict)  # TrainingJob → its start, unix
    gone: set[str] = field(default_factory=set)  # pods seen deleted or being deleted
    stop: threading.Event = field(default_factory=threading.Event)

    def _note(self, obj: dict[str, Any], now: float, deleted: bool = False) -> None:
        meta = obj["metadata"]
        if self.kind == "trainingjobs":
            self._note_job(meta["name"], obj.get("status") or {}, now)
            return
        labels = meta.get("labels") or {}
        job = labels.get(BENCH_JOB) or labels.get(JOB)
        if not job:
            return
        self.job_of.setdefault(meta["name"], job)
        if deleted or "deletionTimestamp" in meta:
            self.gone.add(meta["name"])
        if (obj.get("spec") or {}).get("nodeName") and meta["name"] not in self.bound:
            self.bound[meta["name"]] = now
            self.bound_wall[meta["name"]] = time.time()

    def _note_job(self, name: str, status: dict[str, Any], now: float) -> None:
        if status.get("state"):
            self.admitted.setdefault(name, now)
        start = (status.get("controller") or {}).get("start_time")
        if isinstance(start, str) and name not in self.decided:
            with contextlib.suppress(ValueError):
                self.decided[name] = from_rfc3339(start)

    def run(self) -> None:
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    items, version = self.api.list_objects(self.kind, NAMESPACE)
                    now = time.monotonic()
                    for obj in items:
                        self._note(obj, now)
                for kind, obj in self.api.watch_objects(self.kind, NAMESPACE, "", "", version, 5):
                    version = str(obj["metadata"].get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        self._note(obj, time.monotonic(), kind == "DELETED")
                    if self.stop.is_set():
                        break
            except Expired:
                version = ""
            except ClusterError:
                time.sleep(0.5)


def _plain_pod(
    job: str, rank: int, gpus: int, mode: SideMode, priority: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{job}-{rank}", "labels": {BENCH_JOB: job}}
    if mode is SideMode.VOLCANO:
        meta["annotations"] = {names.GROUP_NAME: job}
    spec: dict[str, Any] = {
        "schedulerName": mode.scheduler_name,
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if priority is not None:
        spec["priorityClassName"] = priority
        spec["terminationGracePeriodSeconds"] = 1  # as caldera's victims in this case
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _pod_group(job: str, size: int, priority: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": size, "queue": QUEUE}
    if priority is not None:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": job},
        "spec": spec,
    }


def _training_job(job: str, size: int, gpus: int, priority: str | None = None) -> dict[str, Any]:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job},
        "spec": {
            "type": JOB_TYPE[priority] if priority else "normal",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": size,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }


def _retry(call: Callable[[], Any]) -> None:
    """Create something, asking again when the API server is busy (as kubectl does); an
    answer lost on the way (409: it exists) counts as created."""
    for attempt in range(5):
        try:
            call()
            return
        except k8s.client.ApiException as error:
            if error.status == 409:
                return
            if error.status not in (429, 500, 503, 504) or attempt == 4:
                raise
            time.sleep(0.5 * 2**attempt)


def _submit(
    api: Any,
    mode: SideMode,
    sizes: Sequence[int],
    gpus: int,
    submitters: int,
    sent: dict[str, float],
    prefix: str = "job",
    priority: str | None = None,
) -> None:
    """Submit every job as `mode`'s users would, named `prefix-00000`…, at `priority` (the
    preemption case); `sent`: when each job's first object was sent."""
    core = k8s.client.CoreV1Api(api)
    custom = k8s.client.CustomObjectsApi(api)

    def one(i: int) -> None:
        job, size = f"{prefix}-{i:05d}", sizes[i]
        sent[job] = time.monotonic()
        if mode.controller:
            body = _training_job(job, size, gpus, priority)
            _retry(
                lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, body
                )
            )
            return
        if mode is SideMode.VOLCANO:
            group = _pod_group(job, size, priority)
            _retry(
                lambda: custom.create_namespaced_custom_object(
                    "scheduling.volcano.sh", "v1beta1", NAMESPACE, "podgroups", group
                )
            )
        for rank in range(size):
            pod = _plain_pod(job, rank, gpus, mode, priority)
            _retry(partial(core.create_namespaced_pod, NAMESPACE, pod))

    with ThreadPoolExecutor(submitters, thread_name_prefix="bench-submit") as pool:
        for done in [pool.submit(one, i) for i in range(len(sizes))]:
            done.result()


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
    _wait(
        "the namespace's default service account",
        lambda: any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account(NAMESPACE).items
        ),
        60,
    )
    if mode is SideMode.VOLCANO:
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
            _wait("Volcano to open the queue", lambda: _queue_open(custom), 120)
        return None
    extensions = k8s.client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(training_job_crd())

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    _wait("the TrainingJob CRD", established, 60)
    config = folder / "caldera.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "queues": [{"name": QUEUE}],
                **({"policy": PREEMPT_POLICY} if preempt else {}),
                "kubernetes": {
                    "namespaces": {NAMESPACE: {"queues": [QUEUE]}},
                    "state_namespace": NAMESPACE,
                    "scheduler_name": mode.scheduler_name,
                    "image": IMAGE,
                    "leader_election": LEASE,
                },
            }
        )
    )
    log = folder / "controller.log"
    controller = _controller(cluster, config, log)
    started.append(controller)

    def leading() -> bool:
        if controller.poll() is not None:
            tail = log.read_text(errors="replace")[-400:]
            raise RuntimeError(f"bench k8s: caldera's controller exited: {tail}")
        return "controller running" in log.read_text(errors="replace")

    _wait("the controller to lead", leading, 120)
    if mode.needs_volcano:
        _wait("Volcano to open caldera's queue", lambda: _queue_open(custom), 120)
    return controller


def _settle(api: Any, last: dict[str, int]) -> dict[str, int]:
    """The API server's counts once the workload's writes have stopped (at most SETTLE_MAX):
    caldera writes a started job's status after its pods are bound."""
    deadline = time.monotonic() + SETTLE_MAX
    while time.monotonic() < deadline:
        time.sleep(SETTLE_STEP)
        now = _server_requests(api)
        grown = sum(
            n - last.get(k, 0) for k, n in now.items() if is_write(k) and not _background(k)
        )
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
) -> None:
    pods = sum(sizes)
    with tempfile.TemporaryDirectory(prefix=f"caldera-bench-{mode.value}-") as tmp:
        folder = Path(tmp)
        cluster = DevCluster(
            folder=folder / "cluster",
            bins=find_bins(),
            nodes=NodeShape(
                count=result.nodes, gpus=result.gpus_per_node, per_hypernode=8,
                hypernodes_per_spine=8,
            ),
            start_timeout=90 + 0.6 * result.nodes,
            node_grace=NODE_GRACE,
            volcano=volcano if mode.needs_volcano else None,
            volcano_conf=SEED_001 if mode is SideMode.VOLCANO else VOLCANO_FOR_CALDERA,
        )  # fmt: skip
        began = time.monotonic()
        cluster.start()
        result.cluster_start_s = round(time.monotonic() - began, 1)
        say(f"{mode.value}: cluster of {result.nodes} nodes up in {result.cluster_start_s:.0f} s")
        api = load_api_client(str(cluster.kubeconfig()))
        watch = _Watch(KubeClusterAPI(api))
        jobs = _Watch(KubeClusterAPI(api), kind="trainingjobs")
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

            cpu_before, requests_before = _cpu(pids), _server_requests(api)
            gone_before = len(watch.gone)
            load_before = os.getloadavg()[0]
            first = time.monotonic()
            sent: dict[str, float] = {}
            failed: list[BaseException] = []

            def submit() -> None:
                try:
                    _submit(
                        api, mode, sizes, gpus, submitters, sent, priority=HIGH if fill else None
                    )
                except Exception as error:  # said as the mode's error below
                    failed.append(error)
                result.submitted_s = round(time.monotonic() - first, 2)

            submitting = threading.Thread(target=submit, daemon=True)
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
            cpu_after = _cpu(pids)
            result.load = (round(load_before, 1), round(os.getloadavg()[0], 1))
            result.bound = len(bound())
            result.all_bound_s = round(last_bind - first, 2)
            result.pods_per_s = round(pods / max(result.all_bound_s, 1e-3), 1)
            delays = [
                t - sent[watch.job_of[pod]]
                for pod, t in watch.bound.items()
                if watch.job_of.get(pod) in sent
            ]
            result.bind_p50_s = round(_percentile(delays, 0.50), 2)
            result.bind_p99_s = round(_percentile(delays, 0.99), 2)
            if mode.controller:
                _admission(result, sizes, sent, watch, jobs)
            grown = {
                k: n - requests_before.get(k, 0)
                for k, n in requests_after.items()
                if n - requests_before.get(k, 0)
            }
            result.server_requests = dict(sorted(grown.items(), key=lambda kv: -kv[1]))
            result.background = {k: n for k, n in result.server_requests.items() if _background(k)}
            result.requests_per_pod, result.writes_per_pod = per_pod(grown, pods)
            result.evictions = len(watch.gone) - gone_before
            result.evictions_per_s = round(result.evictions / max(result.all_bound_s, 1e-3), 1)
            result.cpu_s = {
                k: round(v - cpu_before.get(k, 0.0), 2) for k, v in sorted(cpu_after.items())
            }
            for name, pid in pids.items():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    result.rss_mib[name] = round(_cpu_and_rss(pid)[1], 1)
            say(
                f"{mode.value}: {pods} pods bound in {result.all_bound_s:.1f} s "
                f"({result.pods_per_s:.1f}/s)"
            )
        finally:
            watch.stop.set()
            jobs.stop.set()
            for controller in started:
                if controller.poll() is not None:
                    continue
                controller.terminate()
                try:
                    controller.wait(30)
                except subprocess.TimeoutExpired:
                    controller.kill()
                    controller.wait()
            api.close()
            cluster.stop()


def _fill(
    api: Any,
    mode: SideMode,
    fill: int,
    gpus: int,
    submitters: int,
    watch: _Watch,
    timeout: float,
    say: Callable[[str], None],
) -> float:
    """The preemption case's fillers: `fill` single-pod jobs of low priority, submitted and
    bound before the measured jobs (seconds it took)."""
    began = time.monotonic()
    _submit(api, mode, [1] * fill, gpus, submitters, {}, prefix="fill", priority=LOW)

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


def _admission(
    result: SideResult,
    sizes: Sequence[int],
    sent: dict[str, float],
    pods: _Watch,
    jobs: _Watch,
) -> None:
    """Admission (sent → status first seen) and decision → bind, for a caldera mode."""
    names_in_order = [f"job-{i:05d}" for i in range(len(sizes))]
    third = len(names_in_order) // 3
    middle = names_in_order[third : len(names_in_order) - third] or names_in_order
    waits = {n: jobs.admitted[n] - sent[n] for n in names_in_order if n in jobs.admitted}
    mid = [waits[n] for n in middle if n in waits]
    result.admit_p50_s = round(_percentile(mid, 0.50), 2)
    result.admit_p99_s = round(_percentile(mid, 0.99), 2)
    result.admit_all_p99_s = round(_percentile(list(waits.values()), 0.99), 2)
    to_bind = [
        t - jobs.decided[pods.job_of[pod]]
        for pod, t in pods.bound_wall.items()
        if pods.job_of.get(pod) in jobs.decided
    ]
    result.decision_bind_p50_s = round(_percentile(to_bind, 0.50), 2)
    result.decision_bind_p99_s = round(_percentile(to_bind, 0.99), 2)


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
) -> dict[str, Any]:
    """Run the workload through each mode on its own fresh dev cluster, one after the other.
    A mode that fails (a timeout, a component that died) keeps what it measured and says why
    in `error`; the next mode still runs. `gangs` > 0: the preemption case — the cluster
    filled with low-priority single-pod jobs first, then `gangs` gangs (`gang_sizes`) at high
    priority (`pods` and `gang_share` are then not used)."""
    sizes = gang_sizes(gangs, seed) if gangs else workload(pods, gang_share, seed)
    fill = nodes * (gpus_per_node // gpus_per_pod) if gangs else 0
    results = []
    for mode in modes:
        result = SideResult(
            mode.value, nodes, gpus_per_node, sum(sizes), len(sizes), sum(1 for s in sizes if s > 1)
        )
        try:
            _run_mode(mode, sizes, result, gpus_per_pod, volcano, submitters, timeout, say, fill)
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
        "ratios": ratios({r["mode"]: r["pods_per_s"] for r in results if not r["error"]}),
    }
