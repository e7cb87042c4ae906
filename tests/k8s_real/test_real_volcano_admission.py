"""Volcano's own admission on the real control plane: vc-webhook-manager (built by
`make cluster-bins` from the Go module proxy) judging what caldera writes.

One dev cluster for the module with the real Volcano and its webhooks (`volcano_webhook`:
Queue, PodGroup, Pod and Volcano Job admission, TLS on 127.0.0.1 from the cluster's CA), two
KWOK nodes of 8 GPUs, vc-scheduler configured as docs/kubernetes.md says, and caldera
installed as an operator installs it with its controller binding pods through Volcano.

- every Queue `caldera k8s render` writes (the documented configuration, the examples) is
  admitted by Volcano's Queue webhook, created and replaced as the controller does — and the
  same `serving` queue without caldera's fix (a guarantee and no deserved) is refused;
- a start whose PodGroup the PodGroup webhook refuses (its queue missing, then not Open yet)
  creates no pod, says so in an Event on the TrainingJob and waits; once the queue is back
  and Open the job runs (issue 10, defect 5);
- `volcano.sh/preemptable: "false"` as caldera writes it (PodGroup and pod annotations) is
  admitted, where a `spec.preemptable` would not even be kept by Volcano's PodGroup schema.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from caldera_support import CALDERA, CONFIG, Cluster, _install, free_port, training_job
from real_support import wait_for

from caldera.devcluster import DevCluster, NodeShape
from caldera.devcluster.volcano import VOLCANO_FOR_CALDERA, VolcanoBins
from caldera.k8s import Invalid, names
from caldera.k8s.cluster.client import KubeClusterAPI
from caldera.trainingjob_api import JOB, PLURAL

k8s: Any = kubernetes

REPO = Path(__file__).resolve().parents[2]
VOLCANO = ("scheduling.volcano.sh", "v1beta1")

# docs/kubernetes.md, "1. The configuration file": the queues as documented.
DOCUMENTED: dict[str, Any] = {
    "queues": [
        {
            "name": "team-a",
            "weight": 60,
            "deserved": {"gpu": 64},
            "capability": {"gpu": 128},
            "reclaimable": True,
        },
        {"name": "serving", "weight": 40, "guarantee": {"gpu": 16}, "reclaimable": False},
    ],
    "policy": {"grace_period": 120, "throttle_timeout": 300},
    "kubernetes": {"namespaces": {"team-a": {"queues": ["team-a"]}}},
}

CONFIG_VOLCANO: dict[str, Any] = copy.deepcopy(CONFIG)
CONFIG_VOLCANO["kubernetes"]["scheduler_name"] = "volcano"


@pytest.fixture(scope="module")
def volcano(
    cluster_bins: Path,
    volcano_bins: VolcanoBins,
    helm_bin: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("volcano-admission")
    dev = DevCluster(
        folder=folder / "cluster",
        bins=cluster_bins,
        nodes=NodeShape(count=2, gpus=8, per_hypernode=2),
        volcano=volcano_bins,
        volcano_conf=VOLCANO_FOR_CALDERA,
        volcano_webhook=True,
    )
    dev.start()
    config = folder / "caldera.yaml"
    config.write_text(yaml.safe_dump(CONFIG_VOLCANO))
    cluster = Cluster(dev, folder, folder / "controller.log", config, helm_bin)
    cluster.metrics_port = free_port()
    try:
        _install(cluster)
        cluster.start_controller()
        yield cluster
    finally:
        cluster.stop_controller()
        for api_client in cluster.clients:
            api_client.close()
        dev.stop()


def _queues_rendered(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(CALDERA), "k8s", "render", str(path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d and d.get("kind") == "Queue"]


def test_every_queue_caldera_renders_is_admitted_by_volcanos_queue_webhook(
    volcano: Cluster, tmp_path: Path
) -> None:
    documented = tmp_path / "documented.yaml"
    documented.write_text(yaml.safe_dump(DOCUMENTED))
    # production-14d.yaml has demo.yaml's queues, behind a 14-day workload that takes seconds
    # of CPU to build just to be rendered.
    examples = REPO / "src" / "caldera" / "examples"
    files = [
        documented,
        *(p for p in sorted(examples.glob("*.yaml")) if p.stem != "production-14d"),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        rendered = dict(zip(files, pool.map(_queues_rendered, files), strict=True))
    api = KubeClusterAPI.from_kubeconfig(str(volcano.dev.kubeconfig()))
    custom = k8s.client.CustomObjectsApi(volcano.client())
    try:
        serving = next(q for q in rendered[documented] if q["metadata"]["name"] == "serving")
        # What caldera wrote before the fix (issue 10, defect 5): a guarantee and no deserved.
        # Volcano's queue webhook refuses it, so `caldera k8s run` exited 1 on the docs' config.
        unfixed = copy.deepcopy(serving)
        unfixed["metadata"]["name"] = "serving-unfixed"
        del unfixed["spec"]["deserved"]
        with pytest.raises(Invalid, match="guarantee should less equal than deserved"):
            api.apply_queue(unfixed)
        assert serving["spec"]["deserved"] == {"nvidia.com/gpu": "16"}
        seen = 0
        for path, queues in rendered.items():
            for body in queues:
                # Created, or replaced as the controller replaces it (the webhook judges
                # updates too): the same names come back from several files.
                api.apply_queue(body)
                seen += 1
                stored = custom.get_cluster_custom_object(
                    *VOLCANO, "queues", body["metadata"]["name"]
                )
                assert stored["spec"].get("guarantee") == body["spec"].get("guarantee"), path
        assert seen >= 10
    finally:
        api.close()


def _volcano_queue(volcano: Cluster, name: str) -> dict[str, Any] | None:
    custom = k8s.client.CustomObjectsApi(volcano.client())
    try:
        found: dict[str, Any] = custom.get_cluster_custom_object(*VOLCANO, "queues", name)
    except k8s.client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found


def test_a_pod_group_the_webhook_refuses_creates_no_pod_and_the_job_waits(
    volcano: Cluster,
) -> None:
    """Issue 10, defect 5: Volcano (>= 1.12) refuses a PodGroup whose queue is missing or not
    Open; caldera logged it and still created the pods, which Volcano never schedules."""
    custom = k8s.client.CustomObjectsApi(volcano.client())
    queue = _volcano_queue(volcano, "team-a")
    assert queue is not None and queue["status"]["state"] == "Open"
    custom.delete_cluster_custom_object(*VOLCANO, "queues", "team-a")
    wait_for("team-a gone", lambda: _volcano_queue(volcano, "team-a") is None)
    try:
        job = training_job("orphan", replicas=2, gpus=4)
        assert volcano.apply("bob", "team-a", job).returncode == 0
        # Events go out after the start's objects were created (or not): once the refusal
        # is said, the pods would be there.
        wait_for("the refusal", lambda: "PodGroupRefused" in volcano.events("team-a", "orphan"))
        assert volcano.pods("team-a", "orphan") == []
        status = volcano.status("team-a", "orphan")
        assert status["state"] == "Pending" and status["retries"] == 0, status
    finally:
        # The queue comes back as caldera renders it; Volcano's controller opens it a moment
        # later (until then the webhook still refuses: "not Open yet").
        api = KubeClusterAPI.from_kubeconfig(str(volcano.dev.kubeconfig()))
        try:
            (body,) = [
                q for q in _queues_rendered(volcano.config) if q["metadata"]["name"] == "team-a"
            ]
            api.apply_queue(body)
        finally:
            api.close()
    volcano.wait("team-a", "orphan", "Running", timeout=90)
    status = volcano.status("team-a", "orphan")
    assert (status["state"], status["retries"]) == ("Running", 0)
    pods = volcano.pods("team-a", "orphan")
    assert len(pods) == 2 and all(p.spec.scheduler_name == "volcano" for p in pods)
    assert all(p.spec.node_name for p in pods)  # bound by vc-scheduler, as a gang
    volcano.kubectl("admin", "-n", "team-a", "delete", PLURAL, "orphan", "--wait=false")
    wait_for("orphan's pods gone", lambda: not volcano.pods("team-a", "orphan"))


def test_preemptable_false_as_caldera_writes_it_is_admitted(volcano: Cluster) -> None:
    """A critical job's PodGroup and pods carry `volcano.sh/preemptable: "false"` (annotation:
    Volcano reads it there; issue 9, defect 10) and pass Volcano's admission; a
    `spec.preemptable` would be pruned by Volcano's PodGroup schema, so it would say nothing."""
    job = training_job("chat", gpus=1, type="critical")
    done = volcano.apply("alice", "serving", job)
    assert done.returncode == 0, done.stderr
    volcano.wait("serving", "chat", "Running", timeout=90)
    custom = k8s.client.CustomObjectsApi(volcano.client())
    groups = custom.list_namespaced_custom_object(
        *VOLCANO, "serving", "podgroups", label_selector=f"{JOB}=chat"
    )["items"]
    (group,) = groups
    assert group["metadata"]["annotations"][names.VOLCANO_PREEMPTABLE] == "false"
    assert "preemptable" not in group["spec"]
    (pod,) = volcano.pods("serving", "chat")
    assert pod.metadata.annotations[names.VOLCANO_PREEMPTABLE] == "false"
    # What caldera wrote before: the real schema keeps no spec.preemptable at all.
    probe = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "probe"},
        "spec": {"minMember": 1, "queue": "serving", "preemptable": False},
    }
    stored = custom.create_namespaced_custom_object(*VOLCANO, "serving", "podgroups", probe)
    custom.delete_namespaced_custom_object(*VOLCANO, "serving", "podgroups", "probe")
    assert "preemptable" not in stored["spec"]
    volcano.kubectl("admin", "-n", "serving", "delete", PLURAL, "chat", "--wait=false")
    wait_for("chat's pods gone", lambda: not volcano.pods("serving", "chat"))


def test_a_department_and_its_teams_are_admitted_as_volcano_hierarchical_queues(
    volcano: Cluster,
) -> None:
    """Issue 39: caldera's departments as Volcano v1.14.1's hierarchical Queues (its Queue CRD
    has `spec.parent`): the controller's sync creates the department first, the real queue
    webhook admits both teams under it, and each stored Queue names its parent."""
    from caldera.k8s.config import parse_kube_config
    from caldera.k8s.controller import sync_cluster_objects

    tree = parse_kube_config(
        {
            "queues": [
                {"name": "dept-web", "parent": "dept", "weight": 1, "deserved": {"gpu": 4}},
                {"name": "dept", "weight": 1, "deserved": {"gpu": 8}, "capability": {"gpu": 16}},
                {"name": "dept-search", "parent": "dept", "weight": 1, "deserved": {"gpu": 4}},
            ]
        }
    )
    api = KubeClusterAPI.from_kubeconfig(str(volcano.dev.kubeconfig()))
    try:
        sync_cluster_objects(api, tree.queues, tree.settings)
    finally:
        api.close()
    for name in ("dept-web", "dept-search"):
        stored = _volcano_queue(volcano, name)
        assert stored is not None and stored["spec"]["parent"] == "dept", stored
    department = _volcano_queue(volcano, "dept")
    assert department is not None and department["spec"].get("parent") in (None, "", "root")
