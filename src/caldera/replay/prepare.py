"""What a replay puts on a fresh control plane before its first job: the namespace, then
either caldera's controller (the TrainingJob CRD and the controller process, which creates
its own PriorityClasses and Queues) or what Volcano's users find installed (PriorityClasses,
Queues, HyperNodes for hard-topology gangs), and the wait until the queues are open.

Apart from the replay's run because setting a cluster up changes with the runtimes'
installation (docs/kubernetes.md), not with how a replay measures.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes

from caldera.config import Scenario
from caldera.devcluster import ScenarioNodes
from caldera.k8s.crd import training_job_crd
from caldera.k8s.effects.render import priority_classes, volcano_queue
from caldera.k8s.settings import KubeSettings
from caldera.model import JobSpec
from caldera.replay.api import NAMESPACE, list_volcano_queues, retrying
from caldera.replay.controller import start_controller
from caldera.replay.manifests import hyper_nodes
from caldera.replay.modes import Mode
from caldera.trainingjob_api import GROUP, PLURAL

__all__ = ["prepare"]

k8s: Any = kubernetes


def prepare(
    api: Any,
    scenario: Scenario,
    specs: Sequence[JobSpec],
    mode: Mode,
    kubeconfig: Path,
    folder: Path,
) -> subprocess.Popen[bytes] | None:
    """Set the cluster up for `scenario` (compressed) and its valid jobs `specs` under `mode`;
    returns caldera's controller process when the mode runs one."""
    core = k8s.client.CoreV1Api(api)
    custom = k8s.client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    deadline = time.monotonic() + 60
    while not any(
        sa.metadata.name == "default"
        for sa in core.list_namespaced_service_account(NAMESPACE).items
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("replay: the namespace's default service account never came")
        time.sleep(0.1)
    if mode.controller:
        _install_crd(api)
        controller = start_controller(scenario, mode.scheduler, kubeconfig, folder, custom)
        if mode.scheduler == "volcano":
            _wait_queues_open(custom, scenario)
        return controller
    scheduling = k8s.client.SchedulingV1Api(api)
    for body in priority_classes():
        retrying(partial(scheduling.create_priority_class, body), "PriorityClass")
    settings = KubeSettings()
    for queue in scenario.queues:
        body = volcano_queue(queue, settings)
        create = custom.create_cluster_custom_object
        retrying(
            partial(create, "scheduling.volcano.sh", "v1beta1", "queues", body),
            "creating a queue",
        )
    if any(s.topology is not None and s.topology.mode.value == "hard" for s in specs):
        node_names = ScenarioNodes(scenario.nodes).names()
        for body in hyper_nodes(scenario.nodes, node_names):
            retrying(
                partial(
                    custom.create_cluster_custom_object,
                    "topology.volcano.sh", "v1alpha1", "hypernodes", body,
                ),
                "creating a HyperNode",
            )  # fmt: skip
    _wait_queues_open(custom, scenario)
    return None


def _install_crd(api: Any) -> None:
    """The TrainingJob CRD, as an operator installs it (`caldera k8s render --crds`)."""
    extensions = k8s.client.ApiextensionsV1Api(api)
    retrying(
        partial(extensions.create_custom_resource_definition, training_job_crd()),
        "creating the TrainingJob CRD",
    )
    name = f"{PLURAL}.{GROUP}"
    deadline = time.monotonic() + 60
    while True:
        crd = extensions.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("replay: the TrainingJob CRD was never established")
        time.sleep(0.1)


def _wait_queues_open(custom: Any, scenario: Scenario) -> None:
    deadline = time.monotonic() + 60
    wanted = {q.name for q in scenario.queues}
    while True:
        open_ = {
            q["metadata"]["name"]
            for q in list_volcano_queues(custom)
            if (q.get("status") or {}).get("state") == "Open"
        }
        if wanted <= open_:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"replay: Volcano never opened the queues {sorted(wanted - open_)}")
        time.sleep(0.1)
