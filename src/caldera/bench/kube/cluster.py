"""The benchmarks' cluster: a fresh dev cluster sized for the run, the TrainingJob CRD
installed as an operator would, and caldera's controller as its own process (`caldera k8s
run`: informer cache, leader election) — started, waited for, stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from caldera.bench.kube.measure import wait_for
from caldera.bench.kube.watch import NAMESPACE
from caldera.devcluster import DevCluster, NodeShape, find_bins
from caldera.devcluster.volcano import SEED_001, VolcanoBins
from caldera.k8s.cluster.client import KubeClusterAPI
from caldera.k8s.crd import training_job_crd
from caldera.k8s.reading.nodes import condition_tainted
from caldera.trainingjob_api import GROUP, PLURAL

__all__ = [
    "GC_DISCOVERY",
    "IMAGE",
    "LEASE",
    "NODE_GRACE",
    "QUEUE",
    "SUBMITTERS",
    "bench_cluster",
    "create_retrying",
    "garbage_collector_knows",
    "install_training_jobs",
    "start_controller",
    "stop_controller",
    "untainted",
    "write_config",
]

k8s: Any = kubernetes
LEASE = {"lease_duration": 6, "renew_deadline": 4, "retry_period": 1}
SUBMITTERS = 8  # clients creating jobs at once
NODE_GRACE = 600.0  # seconds a KWOK node's heartbeat may be late (see DevCluster.node_grace)
IMAGE = "registry.invalid/bench:kwok"
QUEUE = "bench"  # the one queue: caldera's, or Volcano's in the `volcano` mode
# Seconds after the TrainingJob CRD is installed before a burst: kube-controller-manager's
# garbage collector reads the API's kinds again every 30 s, and until it watches
# TrainingJobs it looks up the owner of every pod caldera creates with a GET — 1,430 GETs in
# a burst of 1,290 jobs sent right after the CRD, none 45 s after it (issue 40). A real
# cluster has had the CRD long before any burst.
GC_DISCOVERY = 35.0


def bench_cluster(
    folder: Path,
    nodes: int,
    gpus_per_node: int,
    volcano: VolcanoBins | None = None,
    volcano_conf: Mapping[str, Any] = SEED_001,
    volcano_controller_flags: Sequence[str] = (),
) -> DevCluster:
    """A dev cluster (not started) in `folder`/cluster: `nodes` KWOK nodes, 8 to a leaf
    switch and 8 leaves to a spine. Nodes are created one by one and KWOK makes each Ready:
    the start may take longer on a large cluster. A heartbeat late on a loaded machine must
    not make a node NotReady (tainted: the pods caldera pinned there would wait): the bench
    measures caldera, not KWOK (`NODE_GRACE`)."""
    return DevCluster(
        folder=folder / "cluster",
        bins=find_bins(),
        nodes=NodeShape(count=nodes, gpus=gpus_per_node, per_hypernode=8, hypernodes_per_spine=8),
        start_timeout=90 + 0.6 * nodes,
        node_grace=NODE_GRACE,
        volcano=volcano,
        volcano_conf=volcano_conf,
        volcano_controller_flags=volcano_controller_flags,
    )


def untainted(api: Any, timeout: float) -> None:
    """Wait until no node carries one of Kubernetes' own condition taints. The node lifecycle
    controller lifts `node.kubernetes.io/not-ready` only some seconds after KWOK makes a node
    Ready (longer on a loaded machine): a burst sent before that measures the cluster's
    warm-up — pods the scheduler refuses there, jobs caldera holds back — not the runtime (a
    real cluster's nodes are ready long before a burst)."""
    nodes = KubeClusterAPI(api)

    def clear() -> bool:
        return not any(map(condition_tainted, nodes.list_nodes()))

    wait_for("the nodes' not-ready taints to be lifted", clear, timeout)


def install_training_jobs(api: Any) -> float:
    """The TrainingJob CRD, once the API server serves it; returns when (`time.monotonic`)."""
    extensions = k8s.client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(training_job_crd())

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for("the TrainingJob CRD", established, 60)
    return time.monotonic()


def garbage_collector_knows(installed: float) -> None:
    """Wait until kube-controller-manager's garbage collector watches the TrainingJobs
    installed at `installed`: `GC_DISCOVERY` seconds after it."""
    time.sleep(max(0.0, installed + GC_DISCOVERY - time.monotonic()))


def write_config(
    folder: Path, scheduler_name: str, policy: Mapping[str, Any] | None = None
) -> Path:
    """caldera's configuration for the bench namespace: one queue, the controller's state
    there, its pods bound by `scheduler_name`, a short Lease (the recovery waits it out)."""
    config = folder / "caldera.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "queues": [{"name": QUEUE}],
                **({"policy": dict(policy)} if policy else {}),
                "kubernetes": {
                    "namespaces": {NAMESPACE: {"queues": [QUEUE]}},
                    "state_namespace": NAMESPACE,
                    "scheduler_name": scheduler_name,
                    "image": IMAGE,
                    "leader_election": LEASE,
                },
            }
        )
    )
    return config


def start_controller(cluster: DevCluster, config: Path, log: Path) -> subprocess.Popen[bytes]:
    """`caldera k8s run` as its own process, its output appended to `log`."""
    out = log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-c", "from caldera.cli.main import main; main()", "k8s", "run",
             "--kubeconfig", str(cluster.kubeconfig()), "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
    finally:
        out.close()


def stop_controller(controller: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL after 30 s; nothing if it has ended."""
    if controller.poll() is not None:
        return
    controller.terminate()
    try:
        controller.wait(30)
    except subprocess.TimeoutExpired:
        controller.kill()
        controller.wait()


def create_retrying(call: Callable[[], Any]) -> None:
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
