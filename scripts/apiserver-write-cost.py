"""What each kind of write costs the API server, in CPU milliseconds per request.

caldera's controller adds writes on the API server, the component a burst waits on
(docs/benchmarks.md, "Side by side"). This starts a small dev cluster (2 KWOK nodes: the
control plane of `make cluster-bins`), installs the TrainingJob CRD as the chart does, and
sends N requests of each kind, 8 at a time, reading the API server's and etcd's CPU seconds
from /proc before and after each kind:

- a TrainingJob created (what a user sends);
- its status patched as the controller writes it at admission (Pending) and at its start
  (Running, with the restart state a successor reads);
- a pod created and its status patched (what a start and KWOK's kubelet write).

    CALDERA_CLUSTER_BIN_DIR=… .venv/bin/python scripts/apiserver-write-cost.py [N]

One run on a shared machine: compare the kinds within a run, not runs with each other.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes

from caldera.bench.kube.cluster import bench_cluster, install_training_jobs
from caldera.trainingjob_api import API_VERSION, GROUP, KIND, PLURAL, VERSION

k8s: Any = kubernetes
NAMESPACE = "cost"
AT_ONCE = 8
ADMITTED = "2026-12-05T06:00:00Z"
STARTED = "2026-12-05T06:00:10Z"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status(state: str) -> dict[str, Any]:
    """A status as the controller writes it (caldera.k8s.reporting.status), in one shape."""
    running = state == "Running"
    return {
        "state": state,
        "phase": state,
        "queue": "default",
        "gpus": "1",
        "wait": "10s" if running else None,
        "reason": None if running else "waiting for room",
        "attempts": 1 if running else 0,
        "retries": 0,
        "evictions": 0,
        "lostGPUSeconds": 0.0,
        "submitTime": ADMITTED,
        "startTime": STARTED if running else None,
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Running" if running else "Admitted",
                "status": "True",
                "reason": state,
                "message": "attempt 1 on node-0" if running else "admitted to queue default",
                "lastTransitionTime": STARTED if running else ADMITTED,
                "observedGeneration": 1,
            }
        ],
        "controller": {
            "state": state.lower(),
            "attempt": 1 if running else 0,
            "submit": ADMITTED,
            "queue": "default",
            "nomination": None,
            "startedUnder": "default" if running else None,
            "leaving": [],
            "tasks": 1,
            "first_start": STARTED if running else None,
            "placement": {"node-0": 1.0} if running else None,
            "retries": 0,
            "evictions": 0,
            "progress": 0.0,
            "waiting": None if running else "room",
        },
    }


def _training_job(name: str) -> dict[str, Any]:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "tasks": [
                {"name": "worker", "replicas": 1, "template": {"spec": {"containers": [container]}}}
            ]
        },
    }


def _pod(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"metadata": {"name": name}, "spec": {"nodeName": "none", "containers": [container]}}


def main(count: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="caldera-write-cost-"))
    cluster = bench_cluster(folder, 2, 8)
    cluster.start()
    try:
        api = k8s.config.new_client_from_config(str(cluster.kubeconfig()))
        install_training_jobs(api)
        custom = k8s.client.CustomObjectsApi(api)
        core = k8s.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        apiserver, etcd = cluster.pids["kube-apiserver"], cluster.pids["etcd"]
        names = [f"job-{i:05d}" for i in range(count)]

        def measure(what: str, send: Callable[[str], object], items: Sequence[str]) -> None:
            before = _cpu_seconds(apiserver), _cpu_seconds(etcd)
            began = time.monotonic()
            with ThreadPoolExecutor(AT_ONCE) as pool:
                list(pool.map(send, items))
            took = time.monotonic() - began
            server = (_cpu_seconds(apiserver) - before[0]) * 1000 / len(items)
            store = (_cpu_seconds(etcd) - before[1]) * 1000 / len(items)
            print(
                f"{what:32s} {len(items)} requests: API server {server:.2f} ms, "
                f"etcd {store:.2f} ms of CPU each, {took:.1f} s",
                flush=True,
            )

        def patch(status: dict[str, Any]) -> Callable[[str], object]:
            return lambda name: custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NAMESPACE, PLURAL, name, {"status": status}
            )

        measure(
            "TrainingJob created",
            lambda name: custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, _training_job(name)
            ),
            names,
        )
        measure("its status: admitted (Pending)", patch(_status("Pending")), names)
        measure("its status: started (Running)", patch(_status("Running")), names)
        measure(
            "pod created", lambda name: core.create_namespaced_pod(NAMESPACE, _pod(name)), names
        )
        running = {
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }
        measure(
            "its status (the kubelet's)",
            lambda name: core.patch_namespaced_pod_status(name, NAMESPACE, running),
            names,
        )
    finally:
        cluster.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
