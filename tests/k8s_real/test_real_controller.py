"""`caldera k8s run` against the real API server: a job record goes from submission to
Succeeded through PodGroup + pinned pods that kube-scheduler binds on the KWOK nodes caldera
chose.

The controller runs as users run it (the CLI in its own process, its watch loop, the admin
kubeconfig). kube-scheduler stands in for Volcano (see caldera.k8s.devcluster): it honours
caldera's required node affinity but binds pod by pod, so gang binding is not what is tested
here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from real_support import wait_for

from caldera.k8s import names
from caldera.k8s.devcluster import DevCluster

k8s: Any = kubernetes
CALDERA = Path(sys.executable).with_name("caldera")


@pytest.fixture
def controller(dev_cluster: DevCluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """`caldera k8s run` on `namespace`; yields its log file, stops it (SIGTERM) after."""
    config = tmp_path / "caldera.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "queues": [{"name": "team", "weight": 1}],
                "policy": {"grace_period": 5},
                "kubernetes": {
                    "namespace": namespace,
                    "state_namespace": namespace,
                    "scheduler_name": "default-scheduler",
                    "image": "registry.example/train:v1",
                    "resync": 2,
                    "bind_timeout": 30,
                },
            }
        )
    )
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(CALDERA), "k8s", "run",
             "--kubeconfig", str(dev_cluster.kubeconfig()), "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("the controller did not stop on SIGTERM within 20 s")


def record(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {names.JOB_RECORD: "true"}},
        "data": {names.RECORD_KEY: yaml.safe_dump(request)},
    }


def state(core: Any, namespace: str, name: str) -> str:
    labels = core.read_namespaced_config_map(name, namespace).metadata.labels or {}
    return str(labels.get(names.STATE, ""))


def test_a_submitted_gang_runs_on_the_nodes_caldera_chose_and_succeeds(
    core: Any, namespace: str, controller: Path
) -> None:
    request = {
        "queue": "team",
        "type": "normal",
        "tasks": 2,
        "gpus": 8,
        "template": {
            "metadata": {"annotations": {"caldera.io/kwok-run-for": "4s"}},
            "spec": {"containers": [{"name": "main"}]},
        },
    }
    core.create_namespaced_config_map(namespace, record("train", request))

    def log_tail() -> str:
        return "\n".join(controller.read_text(errors="replace").splitlines()[-20:])

    try:
        wait_for("the job Running", lambda: state(core, namespace, "train") == "Running", 60)
        # the record is written first, then the pods are created one by one
        pods = wait_for("both pods created", lambda: _pods(core, namespace, 2))
        for p in pods:
            wait_for(
                f"{p.metadata.name} bound", lambda p=p: _bound(core, namespace, p.metadata.name)
            )
        pods = core.list_namespaced_pod(namespace, label_selector=f"{names.JOB}=train").items
        for p in pods:
            decided = json.loads(p.metadata.annotations[names.PLACEMENT])["node"]
            assert p.spec.node_name == decided  # bound where caldera decided, nowhere else
        assert len({p.spec.node_name for p in pods}) == 2  # 8 GPUs each: one node each
        groups = k8s.client.CustomObjectsApi(core.api_client).list_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", namespace, "podgroups"
        )["items"]
        assert [g["spec"]["minMember"] for g in groups] == [2]
        wait_for("the job Succeeded", lambda: state(core, namespace, "train") == "Succeeded", 60)
    except BaseException:
        sys.stderr.write(f"controller log:\n{log_tail()}\n")
        raise


def _pods(core: Any, namespace: str, count: int) -> list[Any] | None:
    pods = core.list_namespaced_pod(namespace, label_selector=f"{names.JOB}=train").items
    return pods if len(pods) == count else None


def _bound(core: Any, namespace: str, name: str) -> bool:
    return bool(core.read_namespaced_pod(name, namespace).spec.node_name)


def test_a_large_job_preempts_a_normal_one_which_is_requeued_after_its_grace_period(
    core: Any, namespace: str, controller: Path
) -> None:
    """The cluster (4 x 8 GPUs) is full with a normal gang; a large job evicts it with the
    policy's grace period (5 s), starts once the victims' pods are gone, and the victim waits
    Pending for room again."""
    filler = {"queue": "team", "type": "normal", "tasks": 4, "gpus": 8}
    core.create_namespaced_config_map(namespace, record("filler", filler))
    try:
        wait_for("filler Running", lambda: state(core, namespace, "filler") == "Running", 60)
        wait_for("filler's 4 pods Running", lambda: _running(core, namespace, "filler") == 4, 60)
        large = {"queue": "team", "type": "large-job", "tasks": 1, "gpus": 8}
        core.create_namespaced_config_map(namespace, record("large", large))
        wait_for("filler Releasing", lambda: state(core, namespace, "filler") == "Releasing", 60)
        # the record is written first, then the pods are deleted
        evicted = wait_for("filler's pods deleted", lambda: _terminating(core, namespace, "filler"))
        assert {p.metadata.deletion_grace_period_seconds for p in evicted} == {5}
        wait_for("large Running", lambda: _running(core, namespace, "large") == 1, 60)
        assert _pods_of(core, namespace, "filler") == []  # started only once they were gone
        wait_for("filler Pending again", lambda: state(core, namespace, "filler") == "Pending", 60)
    except BaseException:
        tail = "\n".join(controller.read_text(errors="replace").splitlines()[-20:])
        sys.stderr.write(f"controller log:\n{tail}\n")
        raise


def _pods_of(core: Any, namespace: str, job: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"{names.JOB}={job}").items)


def _terminating(core: Any, namespace: str, job: str) -> list[Any] | None:
    pods = _pods_of(core, namespace, job)
    return pods if pods and all(p.metadata.deletion_timestamp for p in pods) else None


def _running(core: Any, namespace: str, job: str) -> int:
    return sum(
        1
        for p in _pods_of(core, namespace, job)
        if p.status.phase == "Running" and not p.metadata.deletion_timestamp
    )
