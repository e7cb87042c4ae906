"""What a replay submits: a scenario's jobs as the users of each runtime would write them.

- For Volcano alone: a Volcano Job (`batch.volcano.sh/v1alpha1`) per job — one task of
  `tasks` replicas, `minAvailable` the gang minimum (job and task), the queue, the job type's
  PriorityClass on the job and its pods, `terminationGracePeriodSeconds` the policy's grace
  period, `networkTopology: {mode: hard, highestTierAllowed: N}` for a hard-topology gang
  (with HyperNodes describing the switches) and a required node affinity on the GPU model. What
  Volcano's admission webhook would default (queue, scheduler name, task `minAvailable`,
  `maxRetry`) is written out: the webhook does not run in the dev cluster.
- For caldera: the TrainingJob caldera's controller reads (caldera.k8s.reading.trainingjob),
  asking for the same tasks, GPUs, checkpointing and topology.

Every pod carries `caldera.io/replay-job: NAME` (its job's Kubernetes name) so the replay can
follow it whatever created it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from caldera.k8s import names
from caldera.k8s.reading.quantities import cpu_quantity, memory_quantity
from caldera.model import GPU_MILLI, JobSpec, Node, TopologyMode
from caldera.trainingjob_api import API_VERSION, KIND

__all__ = [
    "REPLAY_JOB",
    "caldera_job",
    "hyper_nodes",
    "k8s_names",
    "volcano_job",
]

REPLAY_JOB = "caldera.io/replay-job"
IMAGE = "registry.invalid/replay:kwok"  # never pulled: KWOK runs no containers
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_MAX = 40  # caldera's limit for a job name (caldera.k8s.names)


def k8s_names(specs: Sequence[JobSpec]) -> dict[str, str]:
    """A Kubernetes name per job id: lower-case DNS labels of at most 40 characters, unique
    (a clash gets `-2`, `-3`, …)."""
    taken: set[str] = set()
    found: dict[str, str] = {}
    for spec in specs:
        base = _NOT_DNS.sub("-", spec.name.lower()).strip("-")[: _MAX - 4].strip("-") or "job"
        if not base[0].isalpha():
            base = f"j-{base}"[: _MAX - 4]
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        found[spec.id] = name
    return found


def _resources(spec: JobSpec) -> dict[str, Any]:
    gpus = str(max(spec.gpu, GPU_MILLI) // GPU_MILLI)  # a fraction asks for a whole GPU
    requests: dict[str, str] = {"nvidia.com/gpu": gpus}
    if spec.cpu:
        requests["cpu"] = cpu_quantity(spec.cpu)
    if spec.memory:
        requests["memory"] = memory_quantity(spec.memory)
    return {"requests": requests, "limits": {"nvidia.com/gpu": gpus}}


def _model_affinity(spec: JobSpec) -> dict[str, Any] | None:
    if not spec.gpu_models:
        return None
    term = {
        "matchExpressions": [
            {
                "key": "nvidia.com/gpu.product",
                "operator": "In",
                "values": sorted(spec.gpu_models),
            }
        ]
    }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def volcano_job(
    spec: JobSpec, name: str, namespace: str, grace: int, annotations: dict[str, str]
) -> dict[str, Any]:
    """A Volcano Job for `spec`, as a Volcano user writes it."""
    labels = {REPLAY_JOB: name}
    pod_spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "priorityClassName": spec.priority_class.name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "main", "image": IMAGE, "resources": _resources(spec)}],
    }
    affinity = _model_affinity(spec)
    if affinity is not None:
        pod_spec["affinity"] = affinity
    template_annotations = dict(annotations)
    if spec.protected:
        template_annotations[names.VOLCANO_PREEMPTABLE] = "false"
    job: dict[str, Any] = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "schedulerName": "volcano",
            "queue": spec.queue,
            "minAvailable": spec.min_available,
            "priorityClassName": spec.priority_class.name,
            "maxRetry": 1000,
            "tasks": [
                {
                    "name": "task",
                    "replicas": spec.tasks,
                    "minAvailable": spec.min_available,
                    "template": {
                        "metadata": {"labels": labels, "annotations": template_annotations},
                        "spec": pod_spec,
                    },
                }
            ],
        },
    }
    topology = spec.topology
    if topology is not None and topology.mode is TopologyMode.HARD and spec.tasks > 1:
        job["spec"]["networkTopology"] = {
            "mode": "hard",
            "highestTierAllowed": topology.highest_tier,
        }
    return job


def hyper_nodes(nodes: Sequence[Node], node_names: Sequence[str]) -> list[dict[str, Any]]:
    """Volcano HyperNodes for the switches: `leaf-N` (tier 1) holds its nodes, `spine-M`
    (tier 2) its leaves — the same domains the nodes' labels name."""
    leaves: dict[int, list[str]] = {}
    spines: dict[int, set[int]] = {}
    for node, name in zip(nodes, node_names, strict=True):
        leaves.setdefault(node.tier1, []).append(name)
        spines.setdefault(node.tier2, set()).add(node.tier1)

    def hyper(name: str, tier: int, kind: str, members: Sequence[str]) -> dict[str, Any]:
        return {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": name},
            "spec": {
                "tier": tier,
                "members": [
                    {"type": kind, "selector": {"exactMatch": {"name": m}}} for m in members
                ],
            },
        }

    found = [hyper(f"leaf-{t}", 1, "Node", names_) for t, names_ in sorted(leaves.items())]
    found += [
        hyper(f"spine-{t}", 2, "HyperNode", [f"leaf-{leaf}" for leaf in sorted(members)])
        for t, members in sorted(spines.items())
    ]
    return found


def caldera_job(
    spec: JobSpec, name: str, namespace: str, annotations: dict[str, str]
) -> dict[str, Any]:
    """The TrainingJob (caldera.io/v1alpha1) a user of caldera's controller applies."""
    requests: dict[str, str] = {}
    if spec.cpu:
        requests["cpu"] = cpu_quantity(spec.cpu)
    if spec.memory:
        requests["memory"] = memory_quantity(spec.memory)
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if requests:
        container["resources"] = {"requests": requests}
    task: dict[str, Any] = {
        "name": "worker",
        "replicas": spec.tasks,
        "gpus": max(spec.gpu, GPU_MILLI) // GPU_MILLI,
        "template": {
            "metadata": {"labels": {REPLAY_JOB: name}, "annotations": dict(annotations)},
            "spec": {"containers": [container]},
        },
    }
    body: dict[str, Any] = {"queue": spec.queue, "type": spec.type.value, "tasks": [task]}
    if spec.min_available != spec.tasks:
        body["minAvailable"] = spec.min_available
    checkpoint = spec.checkpoint
    if checkpoint.interval or checkpoint.cost or not checkpoint.on_sigterm:
        body["checkpoint"] = {"cost": checkpoint.cost, "onSigterm": checkpoint.on_sigterm}
        if checkpoint.interval:
            body["checkpoint"]["interval"] = checkpoint.interval
    if spec.expected_duration:
        body["expectedDuration"] = spec.expected_duration
    if spec.topology is not None:
        body["topology"] = {
            "mode": spec.topology.mode.value,
            "highestTier": spec.topology.highest_tier,
        }
    if spec.gpu_models:
        body["gpuModel"] = sorted(spec.gpu_models)
    if spec.labels.get("protected") == "true":
        body["protected"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {REPLAY_JOB: name}},
        "spec": body,
    }
