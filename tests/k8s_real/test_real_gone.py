"""A namespace that goes away between the controller's decision and its create (issue 9,
defect 10: a 404 on create escaped the loop), on the real control plane.

The controller here runs in the test's process — the objects `caldera k8s run` builds: the
official client, the informer cache, the runtime with its concurrent writers, the loop — so
that the test can hold its first create in the namespace (the start's pod) until the
namespace is gone. Every request still goes to the real API server, and the answers are its
own: 404 once the namespace is gone, 403 "… because it is being terminated" while something
(here a finalizer on a ConfigMap) keeps it Terminating. Either way the start never began:
the loop goes on, the job is forgotten without being failed or retried, and no GPU stays
counted — a gang filling the whole cluster starts afterwards.

This controller serves a namespace of its own (with its own state namespace and no leader
election), beside the session's controller, which serves others and sees these pods as
foreign. The admission policy only admits TrainingJobs in the session's namespaces, so its
binding is lifted while the test runs.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from caldera_support import Cluster, training_job, without_admission_policy
from real_support import NODES, wait_for

from caldera.k8s import names
from caldera.k8s.cluster.api import Object
from caldera.k8s.cluster.cache import InformerCache
from caldera.k8s.cluster.client import VOLCANO_GROUP, VOLCANO_VERSION, KubeClusterAPI
from caldera.k8s.config import load_kube_config
from caldera.k8s.controller import Controller, sync_cluster_objects
from caldera.k8s.effects.actuator import WRITERS
from caldera.k8s.runtime import KubeRuntime
from caldera.trainingjob_api import GROUP, PLURAL, VERSION

k8s: Any = kubernetes
QUEUE = "gone"
HOLD = "caldera.io/test-hold"


class HeldCreates:
    """The controller's API, with its first create in `namespace` held until `release`;
    what the server answered each create, and every status the controller wrote."""

    def __init__(self, api: KubeClusterAPI, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.answers: list[tuple[str, str, str]] = []  # (kind, "created" or the error, why)
        self.statuses: list[Object] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def _create(self, kind: str, namespace: str, body: Object, create: Callable[..., Any]) -> Any:
        if namespace == self.namespace:
            self.arrived.set()
            self.release.wait(180)
        try:
            made = create(namespace, body)
        except Exception as error:
            self.answers.append((kind, type(error).__name__, str(error)))
            raise
        self.answers.append((kind, "created", ""))
        return made

    def create_pod_group(self, namespace: str, body: Object) -> Any:
        return self._create("PodGroup", namespace, body, self.api.create_pod_group)

    def create_pod(self, namespace: str, body: Object) -> Any:
        return self._create("Pod", namespace, body, self.api.create_pod)

    def patch_job_status(self, namespace: str, name: str, status: Object) -> Object:
        self.statuses.append(status)
        return self.api.patch_job_status(namespace, name, status)


class InProcess:
    """One controller in a thread; `alive` says whether its loop still runs."""

    def __init__(self, kubeconfig: Path, config: Path, served: str) -> None:
        loaded = load_kube_config(config)
        self.settings = loaded.settings
        self.api = KubeClusterAPI.from_kubeconfig(str(kubeconfig))
        self.held = HeldCreates(self.api, served)
        sync_cluster_objects(self.api, loaded.queues, self.settings)
        reads = InformerCache(self.api, self.settings)
        self.runtime = KubeRuntime(
            self.held, loaded.queues, loaded.policy, self.settings, reads=reads, writers=WRITERS
        )
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="in-process-controller")
        self.thread.start()

    def _loop(self) -> None:
        try:
            Controller(self.runtime, resync=self.settings.resync).run(self.stop)
        except BaseException as error:  # the loop died: what the test looks for
            self.failure = error
            raise

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.failure is None

    def free_gpus(self) -> int:
        return sum(self.runtime.room.whole)

    def close(self) -> None:
        self.held.release.set()
        self.stop.set()
        self.thread.join(30)
        self.api.close()


def namespace_gone(core: Any, name: str) -> bool:
    try:
        core.read_namespace(name)
    except k8s.client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def new_namespace(core: Any, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        f"the default service account in {name}",
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items
        ),
    )


@pytest.fixture
def served(clean: Cluster, tmp_path: Path) -> Iterator[tuple[str, InProcess]]:
    """A namespace served by an in-process controller (the policy's binding lifted)."""
    core = k8s.client.CoreV1Api(clean.client())
    name, state = f"gone-{secrets.token_hex(3)}", f"gone-state-{secrets.token_hex(3)}"
    new_namespace(core, name)
    new_namespace(core, state)
    config = tmp_path / "caldera.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "queues": [{"name": QUEUE}],
                "policy": {"grace_period": 3},
                "kubernetes": {
                    "namespaces": {name: {"queues": [QUEUE]}},
                    "state_namespace": state,
                    "scheduler_name": "default-scheduler",
                    "image": "registry.example/train:v1",
                    "resync": 2,
                    "leader_election": {"enabled": False},
                },
            }
        )
    )
    with without_admission_policy(clean):
        controller = InProcess(clean.dev.kubeconfig(), config, name)
        try:
            yield name, controller
        finally:
            controller.close()
            custom = k8s.client.CustomObjectsApi(clean.client())
            for ns in (name, state):
                if not namespace_gone(core, ns):
                    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
                    core.delete_namespace(ns)
            custom.delete_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", QUEUE)


@pytest.mark.parametrize("answer", ["404", "403"], ids=["namespace-gone", "namespace-terminating"])
def test_a_namespace_gone_between_decision_and_create_is_survived_and_forgotten(
    clean: Cluster, served: tuple[str, InProcess], answer: str
) -> None:
    namespace, controller = served
    core = k8s.client.CoreV1Api(clean.client())
    total = NODES.count * NODES.gpus
    wait_for("the controller's first step", lambda: controller.runtime.stats.steps > 0)
    assert clean.apply("admin", namespace, training_job("doomed", gpus=8)).returncode == 0
    wait_for("the start's first create, held", controller.held.arrived.is_set)
    status = clean.status(namespace, "doomed")
    assert (status["state"], status["attempts"]) == ("Running", 1), status  # decided

    if answer == "403":  # something keeps the namespace Terminating after its content went
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "hold", "finalizers": [HOLD]}}
        )
    core.delete_namespace(namespace)
    if answer == "404":
        wait_for("the namespace gone", lambda: namespace_gone(core, namespace), timeout=120)
    else:
        custom = k8s.client.CustomObjectsApi(clean.client())

        def job_gone() -> bool:
            found = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            return not found["items"]

        wait_for("the TrainingJob deleted with its namespace", job_gone, timeout=120)
    written = len(controller.held.statuses)
    controller.held.release.set()

    # Behind kube-scheduler a start writes no PodGroup: its one create in the namespace is
    # the pod.
    wait_for("the start's create answered", lambda: len(controller.held.answers) >= 1)
    answers = controller.held.answers[:1]
    terminating = ["because it is being terminated" in why for _, _, why in answers]
    assert terminating == [answer == "403"], answers  # the server's 403, or its 404
    job_id = names.job_id(namespace, "doomed")
    wait_for("the job forgotten", lambda: job_id not in controller.runtime.jobs)
    steps = controller.runtime.stats.steps
    wait_for("the loop still stepping", lambda: controller.runtime.stats.steps > steps + 2)
    assert controller.alive, controller.failure
    assert controller.free_gpus() == total  # nothing of the start stays counted
    # A namespace going away is nobody's failure: the start never began, and that is all.
    after = controller.held.statuses[written:]
    assert not [s for s in after if s.get("state") == "Failed" or s.get("retries")], after
    assert controller.runtime.actuator.api_errors == 0
    assert [(kind, error) for kind, error, _ in answers] == [("Pod", "NotFound")], answers

    if answer == "403":  # let the namespace go
        core.patch_namespaced_config_map("hold", namespace, {"metadata": {"finalizers": None}})
        wait_for("the namespace gone", lambda: namespace_gone(core, namespace), timeout=120)
    new_namespace(core, namespace)
    gang = training_job("whole", replicas=NODES.count, gpus=NODES.gpus)
    assert clean.apply("admin", namespace, gang).returncode == 0
    wait_for(
        "the gang filling the cluster running",
        lambda: (clean.condition(namespace, "whole", "Running") or ())[:2] == ("True", "Running"),
        timeout=120,
    )
    assert controller.alive, controller.failure
