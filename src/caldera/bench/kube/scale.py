"""`caldera bench k8s`: the controller at scale on a real control plane (issue 10, item 4).

A dev cluster (`caldera.devcluster`: kube-apiserver, controller-manager, kube-scheduler,
KWOK) with `nodes` fake GPU nodes; the TrainingJob CRD and one served namespace installed as
an operator would; `caldera k8s run` as its own process (informer cache, leader election).
Then `jobs` single-pod TrainingJobs asking `gpus` GPUs each are applied at once (more than
the cluster holds — 10,000 one-GPU pods on 1,000 × 8 GPUs — and the first ones, as many as
must make room, end `run_for` seconds after they run, so the rest start as they end) —
`submitters` clients at a time, as many users would (one client creating 10,000 objects one
after another measures that client's round trips, not the controller) — and the bench
watches caldera's pods, stamping each event on arrival (the API server's timestamps have
whole seconds only; the watch reads raw JSON, so the bench's own parsing stays small beside
the controller's):

- decision → bind: from a pod's first sight (the controller creates a pod when the cycle
  decides its start) to the first sight of it bound to its node (`spec.nodeName`): the
  scheduler's share of the start, plus the watch's delivery;
- all bound: from the first submission to the last pod bound;
- the controller's CPU seconds and peak RSS (`/proc/PID/stat`, `VmHWM`);
- API requests per cycle: the controller logs its own counters every 10 s (`stats:` lines:
  cycles, requests sent — retries and watch re-opens included —, full lists, watches); over
  the whole run, and over a `steady` window after every pod is bound and the controller has
  caught up with its writes (`caught_up_s` after the last bind), when nothing changes;
- full re-lists in that window, twice: the controller's informers' own count, and the API
  server's (`apiserver_request_total{verb="LIST"}` from its `/metrics`, every client
  included — the scheduler's and controller-manager's too);
- recovery: the controller SIGKILLed and started again; the time until a job submitted right
  after the kill has its pod created (the Lease's `lease_duration` included: the new process
  first waits out the dead leader's Lease);
- where the machine's CPU went from the first submission to the last bind: each control-plane
  component's CPU seconds (etcd, kube-apiserver, controller-manager, kube-scheduler, KWOK),
  the bench's own, and the load average (other users of the machine included); and what the
  API server answered in that time, by verb and resource, every client included
  (`apiserver_request_total`) — the same for `IDLE` seconds before the first submission,
  when only the control plane itself works (KWOK's node leases and heartbeats).

The dev cluster's node lifecycle controller lets a KWOK node's heartbeat be late by
`NODE_GRACE` seconds (caldera.bench.kube.cluster) before it calls the node NotReady: on this
shared machine KWOK renews a thousand leases late, and nodes flapping NotReady (tainted: the
pods caldera pinned there cannot bind) measured KWOK, not the controller.

Every figure comes from one run on this machine; docs/benchmarks.md records them with the
command line. `caldera bench k8s --modes …` runs another bench, the same workload through
kube-scheduler, Volcano, caldera and caldera + Volcano side by side (caldera.bench.kube.side).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes

from caldera.bench.kube.cluster import (
    SUBMITTERS,
    bench_cluster,
    create_retrying,
    garbage_collector_knows,
    install_training_jobs,
    start_controller,
    stop_controller,
    untainted,
    write_config,
)
from caldera.bench.kube.measure import cpu, cpu_and_rss, percentile, server_requests, wait_for
from caldera.bench.kube.watch import NAMESPACE, PodWatch
from caldera.k8s import names
from caldera.k8s.cluster.client import KubeClusterAPI, load_api_client
from caldera.trainingjob_api import API_VERSION, GROUP, KIND, MANAGED, PLURAL, VERSION

__all__ = ["K8sBenchResult", "bench_k8s", "finishing"]

k8s: Any = kubernetes
IDLE = 10.0  # seconds of the idle control plane measured before the first submission
RUN_FOR = 60.0  # seconds the jobs that must make room run before they end
QUIET = 100  # requests per stats line (10 s) below which the controller has caught up
RECOVERY = 600.0  # seconds the restarted controller has to start the job submitted meanwhile


@dataclass
class K8sBenchResult:
    nodes: int
    gpus_per_node: int
    jobs: int
    gpus_per_job: int
    bound: int = 0
    all_bound_s: float = 0.0
    bind_p50_s: float = 0.0
    bind_p99_s: float = 0.0
    bind_max_s: float = 0.0
    controller_cpu_s: float = 0.0
    controller_rss_mib: float = 0.0
    recovery_s: float = 0.0
    cluster_start_s: float = 0.0
    cycles: int = 0  # the controller's, until every pod was bound
    requests: int = 0
    requests_per_cycle: float = 0.0
    caught_up_s: float = 0.0  # from the last bind until the controller's writes were done
    recovery_error: str = ""  # why no recovery time was measured (recovery_s -1)
    steady_s: float = 0.0  # the quiet window after every pod is bound
    steady_cycles: int = 0
    steady_requests: int = 0
    steady_requests_per_cycle: float = 0.0
    steady_lists: int = 0  # the controller's full lists in the window
    steady_server_lists: dict[str, int] = field(default_factory=dict)  # by resource, all clients
    submitters: int = SUBMITTERS
    submitted_s: float = 0.0  # from the first submission to the last one answered
    # More jobs than the cluster holds at once: the first `finished` end `run_for` seconds
    # after they run (a KWOK annotation), and the rest start in the room they leave.
    finished: int = 0
    run_for: float = 0.0
    # CPU seconds from the first submission to the last bind: each control-plane component,
    # the controller, the bench itself; the 1-minute load average before and at the end.
    cpu_s: dict[str, float] = field(default_factory=dict)
    load_before: float = 0.0
    load_after: float = 0.0
    # The same window at the API server: requests by `VERB resource` (every client).
    server_requests: dict[str, int] = field(default_factory=dict)
    # Before the first submission, nothing to do: what the control plane costs by itself
    # (KWOK's node leases above all) over `idle_s` seconds.
    idle_s: float = 0.0
    idle_cpu_s: dict[str, float] = field(default_factory=dict)
    idle_server_requests: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _submit(
    api: Any, jobs: int, gpus: int, submitters: int, finish: int = 0, run_for: float = 0.0
) -> None:
    """Create `jobs` TrainingJobs, `submitters` at a time (each its own connection); the
    first `finish` of them end `run_for` seconds after they run."""
    custom = k8s.client.CustomObjectsApi(api)

    def create(i: int) -> None:
        body = _job(f"job-{i:05d}", gpus, run_for if i < finish else None)
        create_retrying(
            partial(custom.create_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL, body)
        )

    with ThreadPoolExecutor(submitters, thread_name_prefix="bench-submit") as pool:
        for done in [pool.submit(create, i) for i in range(jobs)]:
            done.result()


def _stats(log: Path) -> dict[str, int] | None:
    """The controller's last `stats:` line (caldera.k8s.controller), None before the first."""
    found = None
    for line in log.read_text(errors="replace").splitlines():
        _, sep, rest = line.partition("stats: ")
        if sep:
            found = {k: int(v) for k, v in (pair.split("=", 1) for pair in rest.split())}
    return found


def _next_stats(log: Path, after: dict[str, int] | None, timeout: float) -> dict[str, int]:
    """Wait for a `stats:` line newer than `after`."""
    box: list[dict[str, int]] = []

    def fresh() -> bool:
        now = _stats(log)
        if now is not None and now != after:
            box[:] = [now]
            return True
        return False

    wait_for("the controller's stats line", fresh, timeout)
    return box[0]


def _quiesced(log: Path, after: dict[str, int], timeout: float) -> dict[str, int]:
    """The first `stats:` line after which the controller sent fewer than `QUIET` requests
    until the next one (its Lease and little else): it has caught up."""
    deadline = time.monotonic() + timeout
    last = after
    while time.monotonic() < deadline:
        now = _next_stats(log, last, 300)
        if now["requests"] - last["requests"] < QUIET:
            return now
        last = now
    raise TimeoutError(f"bench k8s: the controller still writing after {timeout:g} s")


def _server_lists(api: Any) -> dict[str, int]:
    """LIST requests the API server has answered, by resource (every client)."""
    return {
        key.split(" ", 1)[1]: n
        for key, n in server_requests(api).items()
        if key.startswith("LIST ")
    }


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What grew between two counts, largest first."""
    grown = {k: round(v - before.get(k, 0), 1) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in grown.items() if v), key=lambda kv: -kv[1]))


def _job(name: str, gpus: int, run_for: float | None = None) -> dict[str, Any]:
    """A single-pod TrainingJob; with `run_for`, KWOK ends its pod (exit 0) that many seconds
    after it runs."""
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    if run_for is not None:
        template["metadata"] = {"annotations": {"caldera.io/kwok-run-for": f"{run_for:g}s"}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "type": "normal",
            "tasks": [{"name": "worker", "replicas": 1, "template": template}],
        },
    }


def finishing(nodes: int, gpus_per_node: int, jobs: int, gpus_per_job: int) -> int:
    """How many jobs must end for all `jobs` (and the recovery's one more) to have run:
    those beyond what the cluster holds at once."""
    fit = nodes * (gpus_per_node // gpus_per_job)
    return max(jobs + 1 - fit, 0)


def bench_k8s(
    nodes: int,
    gpus_per_node: int,
    jobs: int,
    gpus_per_job: int,
    timeout: float = 900.0,
    steady: float = 30.0,
    submitters: int = SUBMITTERS,
    logs: Path | None = None,
    run_for: float = RUN_FOR,
) -> K8sBenchResult:
    """Run the benchmark on a fresh dev cluster; everything is torn down afterwards (the
    components' and the controller's logs copied to `logs` first, if given)."""
    result = K8sBenchResult(nodes, gpus_per_node, jobs, gpus_per_job, submitters=submitters)
    result.finished = finishing(nodes, gpus_per_node, jobs, gpus_per_job)
    result.run_for = run_for if result.finished else 0.0
    with tempfile.TemporaryDirectory(prefix="caldera-bench-k8s-") as tmp:
        folder = Path(tmp)
        cluster = bench_cluster(folder, nodes, gpus_per_node)
        began = time.monotonic()
        cluster.start()
        api = load_api_client(str(cluster.kubeconfig()))
        untainted(api, cluster.start_timeout)
        result.cluster_start_s = time.monotonic() - began
        controller: subprocess.Popen[bytes] | None = None
        watch = PodWatch(KubeClusterAPI(api), label=f"{MANAGED}=true")
        try:
            k8s.client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
            installed = install_training_jobs(api)
            config = write_config(folder, "default-scheduler")
            log = folder / "controller.log"
            controller = start_controller(cluster, config, log)
            wait_for(
                "the controller to lead",
                lambda: "controller running" in log.read_text(errors="replace"),
                120,
            )
            garbage_collector_knows(installed)
            thread = threading.Thread(target=watch.run, daemon=True)
            thread.start()
            custom = k8s.client.CustomObjectsApi(api)
            pids = {**cluster.pids, "controller": controller.pid, "bench": os.getpid()}
            idle = time.monotonic()
            cpu_idle, requests_idle = cpu(pids), server_requests(api)
            time.sleep(IDLE)
            cpu_before, requests_before = cpu(pids), server_requests(api)
            result.idle_s = round(time.monotonic() - idle, 1)
            result.idle_cpu_s = _delta(cpu_before, cpu_idle)
            result.idle_server_requests = _delta(requests_before, requests_idle)
            result.load_before = os.getloadavg()[0]
            submitted = time.monotonic()
            _submit(api, jobs, gpus_per_job, submitters, result.finished, run_for)
            result.submitted_s = time.monotonic() - submitted
            wait_for("every pod bound", lambda: len(watch.bound) >= jobs, timeout)
            cpu_after, requests_after = cpu(pids), server_requests(api)
            result.load_after = os.getloadavg()[0]
            result.cpu_s = _delta(cpu_after, cpu_before)
            result.server_requests = _delta(requests_after, requests_before)
            result.bound = len(watch.bound)
            result.all_bound_s = max(watch.bound.values()) - submitted
            delays = [watch.bound[n] - watch.seen[n] for n in watch.bound if n in watch.seen]
            result.bind_p50_s = percentile(delays, 0.50)
            result.bind_p99_s = percentile(delays, 0.99)
            result.bind_max_s = max(delays, default=0.0)
            result.controller_cpu_s, result.controller_rss_mib = cpu_and_rss(controller.pid)
            last_bound = max(watch.bound.values())
            began_stats = _next_stats(log, _stats(log), 300)
            result.cycles, result.requests = began_stats["cycles"], began_stats["requests"]
            result.requests_per_cycle = result.requests / max(result.cycles, 1)

            # The controller may still be writing (the `Running` conditions of a big burst,
            # the ends of the jobs that made room): steady state begins once it is done.
            began_stats = _quiesced(log, began_stats, timeout)
            result.caught_up_s = max(time.monotonic() - last_bound, 0.0)

            # Steady state: every pod bound, nothing changes; what does the controller ask?
            quiet = time.monotonic()
            server_before = _server_lists(api)
            time.sleep(steady)
            ended_stats = _next_stats(log, began_stats, 300)
            server_after = _server_lists(api)
            result.steady_s = time.monotonic() - quiet
            result.steady_cycles = ended_stats["cycles"] - began_stats["cycles"]
            result.steady_requests = ended_stats["requests"] - began_stats["requests"]
            result.steady_requests_per_cycle = result.steady_requests / max(result.steady_cycles, 1)
            result.steady_lists = ended_stats["lists"] - began_stats["lists"]
            result.steady_server_lists = {
                r: n - server_before.get(r, 0)
                for r, n in sorted(server_after.items())
                if n - server_before.get(r, 0)
            }

            # Recovery: a crash, a new process, and a job submitted meanwhile.
            controller.send_signal(signal.SIGKILL)
            controller.wait(30)
            killed = time.monotonic()
            controller = start_controller(cluster, config, log)
            late = "late-00000"  # room for it: one GPU beyond the jobs that stay (finishing)
            custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, _job(late, gpus_per_job)
            )
            pod = names.pod_name(late, 1, 0)
            try:
                wait_for("the job submitted after the crash", lambda: pod in watch.seen, RECOVERY)
                result.recovery_s = watch.seen[pod] - killed
            except TimeoutError as error:  # what was measured before stays measured
                result.recovery_s = -1.0
                result.recovery_error = f"{error}; the new controller's exit code: " + str(
                    controller.poll()
                )
        finally:
            watch.stop.set()
            if controller is not None:
                stop_controller(controller)
            api.close()
            cluster.stop()
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                for kept in [
                    *(folder / "cluster" / "logs").glob("*.log"),
                    folder / "controller.log",
                ]:
                    if kept.exists():
                        shutil.copy(kept, logs / kept.name)
    return result
