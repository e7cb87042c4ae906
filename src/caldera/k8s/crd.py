"""The job resource users submit: `TrainingJob` (`caldera.io/v1alpha1`), as a CRD.

    apiVersion: caldera.io/v1alpha1
    kind: TrainingJob
    metadata: {name: bert-ft, namespace: team-a}
    spec:
      type: large-job                # critical | large-job | normal | debug — never a number
      queue: team-a                  # optional: the namespace's default queue
      minAvailable: 4                # gang size (default: every replica)
      tasks:                         # as in a Volcano Job: replicas of a pod template
        - name: worker
          replicas: 4
          template:
            spec:
              containers:
                - name: trainer
                  image: registry.example.com/train:v1
                  command: [torchrun, --nnodes=4, --nproc_per_node=8, train.py]
                  resources: {limits: {nvidia.com/gpu: 8}, requests: {cpu: 32, memory: 256Gi}}
      checkpoint: {interval: 3600, cost: 60, onSigterm: true}
      topology: {mode: hard, highestTier: 1}
      maxRetries: 2

It reads like a Volcano Job (`tasks` with `replicas` and a pod `template`, `minAvailable`,
`queue`) plus what caldera decides with: the job `type`, checkpointing, topology, expected
duration. The API server checks the shape (OpenAPI schema, CEL rules) at `kubectl apply`;
the spec is immutable once created (delete and re-create, as a Volcano Job's tasks are).

The status is a subresource: only the controller, which alone is granted
`trainingjobs/status`, writes it, and the API server drops any status a user sends with the
object — so a hand-written status changes nothing (issue 9, defect 1). It carries the state,
the conditions `kubectl wait --for=condition=Running` reads, the columns `kubectl get` prints
(queue, type, state, GPUs, wait, age), and under `status.controller` what a restarted
controller needs (work accounting, reservation); the tasks themselves live on their pods.
"""

from __future__ import annotations

from typing import Any

from caldera.model import JobType
from caldera.trainingjob_api import (
    GROUP,
    KIND,
    MANAGED,
    PLURAL,
    VERSION,
    training_job,  # re-exported: the SDK shares it
)

__all__ = [
    "CONDITION_TYPES",
    "MAX_GPUS",
    "MAX_REPLICAS",
    "MAX_SECONDS",
    "MAX_TASK_GROUPS",
    "training_job",
    "training_job_crd",
]

# Condition types, each True/False with a reason; `kubectl wait --for=condition=Finished`.
CONDITION_TYPES = (
    "Admitted",
    "Held",
    "Waiting",
    "Running",
    "Preempted",
    "Finished",
    "Failed",
    "Rejected",
)

# Bounds the schema and the controller's own reading (`caldera.k8s.reading.trainingjob`) share.
MAX_TASK_GROUPS = 16
MAX_REPLICAS = 4096
MAX_GPUS = 1024  # per replica: more than any node has; a larger number is a typo or worse
MAX_SECONDS = 10**9  # ~31 years: checkpoint intervals and costs, expected durations


def _number(**bounds: Any) -> dict[str, Any]:
    return {"type": "number", **bounds}


def _integer(**bounds: Any) -> dict[str, Any]:
    return {"type": "integer", "format": "int32", **bounds}


def _spec_schema() -> dict[str, Any]:
    task = {
        "type": "object",
        "required": ["replicas", "template"],
        "properties": {
            "name": {
                "type": "string",
                "maxLength": 63,
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            },
            "replicas": _integer(minimum=1, maximum=MAX_REPLICAS),
            "gpus": {
                **_number(minimum=0, maximum=MAX_GPUS),
                "description": "GPUs per replica, a fraction (0.5) only for one replica; "
                "default: the first container's limit of the GPU resource",
            },
            "gpuProfile": {
                "type": "string",
                "maxLength": 32,
                "description": "one MIG slice of this profile (1g.10gb) per replica",
            },
            "template": {
                "type": "object",
                "description": "a PodTemplateSpec; caldera sets the fields that decide where "
                "and when the pod runs",
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }
    return {
        "type": "object",
        "required": ["tasks"],
        "x-kubernetes-validations": [
            {
                "rule": "self == oldSelf",
                "message": "spec is immutable: delete the TrainingJob and create it again",
            },
            {
                "rule": "!has(self.minAvailable) || "
                "self.minAvailable <= self.tasks.map(t, t.replicas).sum()",
                "message": "minAvailable exceeds the replicas of all tasks",
            },
        ],
        "properties": {
            "type": {
                "type": "string",
                "enum": [t.value for t in JobType],
                "default": JobType.NORMAL.value,
                "description": "critical | large-job | normal | debug: the priority class "
                "follows from it",
            },
            "queue": {"type": "string", "maxLength": 63},
            "minAvailable": _integer(minimum=1),
            "tasks": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_TASK_GROUPS,
                "items": task,
            },
            "checkpoint": {
                "type": "object",
                "properties": {
                    "interval": _number(exclusiveMinimum=True, minimum=0, maximum=MAX_SECONDS),
                    "cost": _number(minimum=0, maximum=MAX_SECONDS),
                    "onSigterm": {"type": "boolean", "default": True},
                },
            },
            "topology": {
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["hard", "soft"], "default": "soft"},
                    "highestTier": {**_integer(), "enum": [1, 2], "default": 1},
                },
            },
            "expectedDuration": _number(exclusiveMinimum=True, minimum=0, maximum=MAX_SECONDS),
            "maxRetries": _integer(minimum=0, maximum=100),
            "gpuModel": {
                "type": "array",
                "maxItems": 16,
                "items": {"type": "string", "maxLength": 128},
            },
            "protected": {
                "type": "boolean",
                "description": "never chosen as a victim (needs the RBAC verb `protect`)",
            },
        },
    }


def _status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "state": {"type": "string"},
            "phase": {
                "type": "string",
                "description": "the state, but Starting until the pods it needs run",
            },
            "queue": {"type": "string"},
            "gpus": {"type": "string"},
            "wait": {"type": "string"},
            "reason": {"type": "string"},
            "attempts": {"type": "integer"},
            "retries": {"type": "integer"},
            "evictions": {"type": "integer"},
            "exitCode": {"type": "integer"},
            "lostGPUSeconds": {"type": "number"},
            "submitTime": {"type": "string", "format": "date-time"},
            "startTime": {"type": "string", "format": "date-time"},
            "endTime": {"type": "string", "format": "date-time"},
            "nodes": {"type": "array", "items": {"type": "string"}},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            # Atomic: the API server's field manager tracks it as one field, not each of
            # its leaves, and every status write pays for that tracking — a started job's
            # status patch cost the dev cluster's API server 3.1 ms of CPU against 3.7 ms
            # (scripts/apiserver-write-cost.py's statuses, both CRDs in one run; an
            # admission's, mostly nulls, the same; issue 40). The controller always writes
            # it whole, with a merge patch, which the map type does not change.
            "controller": {
                "type": "object",
                "description": "what a restarted controller needs; not an interface",
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-map-type": "atomic",
            },
        },
    }


def training_job_crd() -> dict[str, Any]:
    """The CustomResourceDefinition, as `caldera k8s render --crds` prints it."""
    columns = [
        ("Queue", "string", ".status.queue"),
        ("Type", "string", ".spec.type"),
        ("State", "string", ".status.phase"),
        ("GPUs", "string", ".status.gpus"),
        ("Wait", "string", ".status.wait"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {MANAGED: "true"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["tj"],
                "categories": ["caldera"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": name, "type": kind, "jsonPath": path}
                        for name, kind, path in columns
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": _spec_schema(),
                                "status": _status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }
