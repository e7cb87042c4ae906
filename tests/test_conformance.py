"""Cross-runtime conformance (DESIGN §1: "what the simulator shows is what the service does").

One scenario — a large job taking research's borrowed room back (reclaim) behind its queue's
waiting mode, a critical job preempting a large one, emergency checkpoints, a shared GPU,
jobs that must wait — goes through the three runtimes:

- the simulator (`caldera.sim`), on its virtual clock;
- the service runtime (`caldera.service.runtime.Runtime`) with a fake process launcher and a
  fake clock: a signalled process writes its emergency checkpoint (`checkpoint.cost` seconds)
  and exits, as the SDK makes real jobs do;
- the Kubernetes runtime (`caldera.k8s.KubeRuntime`) on the in-memory cluster: a deleted pod
  exits once its checkpoint is written (`FakeCluster.exit_on_sigterm`).

Each is read from its own output — the simulator's event log, the service's event table, the
pods the controller creates and deletes — and must show the same starts (job, nodes, GPUs)
and evictions (job), at the same times, in the same order.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from caldera.core import PolicyConfig
from caldera.k8s import FakeCluster, KubeRuntime, KubeSettings, NamespaceBinding, names
from caldera.k8s.config import parse_kube_config
from caldera.model import NodeGroup, expand_node_groups
from caldera.service.api import JobRequest
from caldera.service.config import parse_config
from caldera.service.launcher import JobFiles, Launch
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for
from caldera.sim import parse_scenario, simulate
from caldera.trainingjob_api import JOB, PLACEMENT

T0 = 1_800_000_000.0  # the service's and the cluster's clocks start here (a Monday)
HORIZON = 240
NAMESPACE = "team"
GRACE = 120

QUEUES = [
    {"name": "prod", "deserved": {"gpu": 8}, "reclaimable": False},
    {"name": "research", "deserved": {"gpu": 8}, "reclaimable": True},
]
POLICY = {"grace_period": GRACE}
# name, queue, type, submit, GPUs per task, emergency checkpoint cost (seconds). What the
# core decides for them is the core's business (tests/core); here only that every runtime
# carries out the same decisions at the same times.
JOBS = [
    ("r0", "research", "normal", 0, 8, 10),
    ("r1", "research", "normal", 1, 8, 10),  # research borrows prod's share
    ("p0", "prod", "normal", 10, 8, 20),
    ("p1", "prod", "large-job", 30, 8, 30),  # waiting mode on prod; takes room back
    ("c0", "prod", "critical", 60, 1, 10),  # preempts whom it must, anywhere
    ("d0", "research", "debug", 80, 0.5, 0),  # a shared GPU
    ("n0", "prod", "normal", 90, 8, 10),
]
DURATION = 100_000  # nothing finishes before the horizon

Start = tuple[float, str, tuple[tuple[str, float], ...]]  # t, job, ((node, GPUs), …)
Evict = tuple[float, str]  # t, job (the runtimes' own outputs agree on no more than this)


def _placement(where: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((node, float(gpus)) for node, gpus in where.items() if gpus))


# -- the simulator ------------------------------------------------------------------------------


def simulated_events() -> list[dict[str, Any]]:
    scenario = parse_scenario(
        {
            "cluster": {
                "nodes": [
                    {"prefix": "n", "count": 2, "gpus": 8, "nvlink_island": 8, "nodes_per_tier1": 2}
                ]
            },
            "queues": QUEUES,
            "policy": POLICY,
            "jobs": [
                {
                    "name": name,
                    "queue": queue,
                    "type": kind,
                    "submit": submit,
                    "duration": DURATION,
                    "gpus_per_task": gpus,
                    "checkpoint_cost": cost,
                }
                for name, queue, kind, submit, gpus, cost in JOBS
            ],
            "until": HORIZON,
        }
    )
    events: list[dict[str, Any]] = simulate(scenario)["events"]
    return events


def starts_and_evictions(events: list[dict[str, Any]]) -> tuple[list[Start], list[Evict]]:
    starts = [
        (e["t"], e["job"], _placement(e["placement"])) for e in events if e["kind"] == "start"
    ]
    evicts = [(e["t"], e["job"]) for e in events if e["kind"] == "evict"]
    return starts, evicts


# -- the service --------------------------------------------------------------------------------


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


@dataclass
class Processes:
    """The launcher seam: a process runs until signalled; on SIGTERM it writes its emergency
    checkpoint (its job's `checkpoint.cost`) and exits, unless that takes longer than the
    grace period (then SIGKILL ends it)."""

    clock: Clock
    launches: dict[int, Launch] = field(default_factory=dict)
    exit_at: dict[int, float] = field(default_factory=dict)

    def spawn(self, launch: Launch) -> tuple[int, int | None]:
        pid = 1000 + len(self.launches)
        self.launches[pid] = launch
        return pid, 1

    def ended(
        self, files: JobFiles, attempt: int, rank: int, pid: int | None, ticks: int | None
    ) -> tuple[bool, int | None]:
        at = self.exit_at.get(pid or 0)
        return (True, 143) if at is not None and self.clock.now >= at else (False, None)

    def recorded(self, files: JobFiles, attempt: int, rank: int) -> tuple[int, int | None] | None:
        return None

    def signal(self, pid: int | None, ticks: int | None, signum: signal.Signals) -> bool:
        assert pid is not None
        cost = COST[self.launches[pid].command[-1]]  # the command names the job
        if signum is signal.SIGKILL:
            self.exit_at[pid] = min(self.exit_at.get(pid, self.clock.now), self.clock.now)
        elif cost <= GRACE:
            self.exit_at.setdefault(pid, self.clock.now + cost)
        return True


COST = {name: float(cost) for name, _, _, _, _, cost in JOBS}


def through_the_service(tmp_path: Path) -> tuple[list[Start], list[Evict]]:
    nodes = expand_node_groups(
        [NodeGroup(prefix="n", count=2, gpus=8, nvlink_island=8, nodes_per_tier1=2)]
    )
    config = parse_config(
        {
            "queues": QUEUES,
            "tokens": [{"token": "conformance-0001", "user": "ops", "critical": True}],
            "policy": POLICY,
        }
    )
    store = Store(database_url_for(tmp_path))
    store.migrate()
    clock = Clock()
    processes = Processes(clock)
    runtime = Runtime(config, store, tmp_path, nodes, processes, clock)  # type: ignore[arg-type]
    runtime.recover()
    ids: dict[str, str] = {}
    for second in range(HORIZON + 1):
        clock.now = T0 + second
        for name, queue, kind, submit, gpus, cost in JOBS:
            if submit == second:
                ids[name] = runtime.submit(_service_request(name, queue, kind, gpus, cost), "ops")[
                    "id"
                ]
        runtime.step()
        runtime.launch_pending()
    names_of = {job_id: name for name, job_id in ids.items()}
    events = store.events(limit=100_000)
    starts = [
        (e["t"] - T0, names_of[e["job"]], _placement(e["data"]["placement"]))
        for e in events
        if e["kind"] == "start"
    ]
    evicts = [(e["t"] - T0, names_of[e["job"]]) for e in events if e["kind"] == "evict"]
    store.close()
    return starts, evicts


def _service_request(name: str, queue: str, kind: str, gpus: float, cost: float) -> dict[str, Any]:
    return JobRequest.model_validate(
        {
            "name": name,
            "queue": queue,
            "type": kind,
            "gpus": gpus,
            "command": ["train", name],
            "checkpoint": {"cost": cost},
        }
    ).normalised()


# -- Kubernetes ---------------------------------------------------------------------------------


@dataclass
class RecordingCluster(FakeCluster):
    """The in-memory cluster, noting when each pod was created and evicted; an evicted pod
    exits once its emergency checkpoint is written."""

    created: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    deleted: list[tuple[float, str]] = field(default_factory=list)

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        pod = super().create_pod(namespace, body)
        self.created.append((self.clock.now, pod))
        job = pod["metadata"]["labels"][JOB]
        self.exit_on_sigterm(namespace, pod["metadata"]["name"], COST[job])
        return pod

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        self.deleted.append((self.clock.now, name))
        return super().evict_pod(namespace, name, grace_seconds, uid)


def through_kubernetes() -> tuple[list[Start], list[Evict]]:
    config = parse_kube_config({"queues": QUEUES, "policy": POLICY})
    cluster = RecordingCluster()
    cluster.clock.now = T0
    for i in range(2):
        cluster.add_node(f"n-{i}", gpus=8, labels={"caldera.io/hypernode": "h0"})
    queues = tuple(queue["name"] for queue in QUEUES)
    settings = KubeSettings(
        image="registry.example.com/train:v1",
        namespaces={NAMESPACE: NamespaceBinding(queues, critical=True)},
    )
    policy: PolicyConfig = config.policy
    runtime = KubeRuntime(cluster, config.queues, policy, settings, clock=cluster.clock)
    for second in range(HORIZON + 1):
        cluster.clock.now = T0 + second
        cluster.settle()
        for name, queue, kind, submit, gpus, cost in JOBS:
            if submit == second:
                task = {"name": "worker", "replicas": 1, "gpus": gpus, "template": {}}
                spec = {"queue": queue, "type": kind, "tasks": [task], "checkpoint": {"cost": cost}}
                cluster.submit(NAMESPACE, name, spec)
        runtime.step()
        cluster.settle()
    pods: dict[str, str] = {}
    starts: dict[tuple[float, str, str], dict[str, float]] = {}
    for t, pod in cluster.created:
        job = pod["metadata"]["labels"][JOB]
        pods[pod["metadata"]["name"]] = job
        node = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        group = pod["metadata"]["annotations"][names.GROUP_NAME]
        share = starts.setdefault((t, job, group), {})
        share[node] = share.get(node, 0.0) + _pod_gpus(pod)
    evicts: list[Evict] = []
    for t, name in cluster.deleted:
        if (t - T0, pods[name]) not in evicts:  # one eviction deletes every pod of its gang
            evicts.append((t - T0, pods[name]))
    return [(t - T0, job, _placement(where)) for (t, job, _), where in starts.items()], evicts


def _pod_gpus(pod: dict[str, Any]) -> float:
    annotations = pod["metadata"].get("annotations") or {}
    placement = json.loads(annotations[PLACEMENT])
    return float(placement["milli"] * len(placement["devices"]) / 1000)


# -- the property -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return simulated_events()


@pytest.fixture(scope="module")
def simulated(events: list[dict[str, Any]]) -> tuple[list[Start], list[Evict]]:
    return starts_and_evictions(events)


def test_the_scenario_exercises_what_it_claims(
    events: list[dict[str, Any]], simulated: tuple[list[Start], list[Evict]]
) -> None:
    starts, evicts = simulated
    kinds = {e["kind"] for e in events}
    reasons = {e["reason"] for e in events if e["kind"] == "evict"}
    assert {"throttle_on", "throttle_off", "checkpoint"} <= kinds
    assert {"reclaim", "preempt"} <= reasons
    started = {job: where for _, job, where in starts}
    assert "c0" in started and started["d0"] == (("n-1", 0.5),)
    assert len(starts) < len(JOBS)  # some wait: the runtimes must agree on that too
    assert len(evicts) >= 2


def test_the_service_starts_and_evicts_what_the_simulator_does(
    simulated: tuple[list[Start], list[Evict]], tmp_path: Path
) -> None:
    assert through_the_service(tmp_path) == simulated


def test_kubernetes_starts_and_evicts_what_the_simulator_does(
    simulated: tuple[list[Start], list[Evict]],
) -> None:
    assert through_kubernetes() == simulated
