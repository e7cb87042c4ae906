"""The Volcano and scheduling objects caldera renders: the four PriorityClasses, a queue as
a Volcano Queue (and a Volcano Queue read back as a queue), and a started job's PodGroup.
Pure functions, like `caldera.k8s.effects.render` (the pods and Service of a started job), which
re-exports them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from caldera.core import Nomination
from caldera.k8s import names
from caldera.k8s.reading.quantities import mig_resource, resource_list, resources_from_list
from caldera.k8s.settings import KubeSettings
from caldera.model import (
    GPU_MILLI,
    PRIORITY_CLASSES,
    JobSpec,
    JobType,
    Node,
    Queue,
    QueueState,
    Resources,
    TimeWindow,
)
from caldera.runtime.wire import ByName, nomination_to_wire
from caldera.trainingjob_api import (
    ATTEMPT,
    DESERVED,
    JOB,
    JOB_ID,
    JOB_TYPE,
    MANAGED,
    NOMINATION,
    QUEUE,
    QUEUE_STATE,
    TIME_WINDOWS,
)

if TYPE_CHECKING:
    from caldera.k8s.effects.render import Owner

__all__ = [
    "SCHEDULING_API",
    "VOLCANO_SCHEDULING_API",
    "job_labels",
    "pod_group",
    "priority_classes",
    "queue_from_volcano",
    "volcano_queue",
]

SCHEDULING_API = "scheduling.k8s.io/v1"
VOLCANO_SCHEDULING_API = "scheduling.volcano.sh/v1beta1"

_CLASS_DESCRIPTIONS = {
    JobType.CRITICAL: "caldera critical: online inference, top-tier training; never preempted",
    JobType.LARGE: "caldera large-job: distributed training (32+ GPUs); preempted by critical",
    JobType.NORMAL: "caldera normal: restartable jobs; preempted by large-job and critical",
    JobType.DEBUG: "caldera debug: development; preempted by anyone, never preempts",
}


# -- priority classes and queues -----------------------------------------------------------


def priority_classes() -> list[dict[str, Any]]:
    """The four classes, straight from the one table (`caldera.model.PRIORITY_CLASSES`)."""
    return [
        {
            "apiVersion": SCHEDULING_API,
            "kind": "PriorityClass",
            "metadata": {"name": pc.name, "labels": {MANAGED: "true"}},
            "value": pc.value,
            "globalDefault": False,
            "preemptionPolicy": pc.preemption_policy.value,
            "description": _CLASS_DESCRIPTIONS[job_type],
        }
        for job_type, pc in PRIORITY_CLASSES.items()
    ]


def _windows_json(windows: Sequence[TimeWindow]) -> str:
    return json.dumps(
        [
            {"days": sorted(w.days), "hours": [_hour(w.start_hour), _hour(w.end_hour)]}
            for w in windows
        ],
        separators=(",", ":"),
    )


def _hour(hour: float) -> float:
    """A whole hour as an integer: the annotation reads the same whether the model holds 9 or
    9.0 (the compiled core stores every float field as a float, caldera/compiled.py)."""
    return int(hour) if float(hour).is_integer() else hour


def volcano_queue(queue: Queue, settings: KubeSettings) -> dict[str, Any]:
    """A caldera queue as a Volcano Queue.

    Volcano's Queue has no `spec.state` (state is status, changed with `vcctl queue operate`)
    and no time windows, and the API server prunes unknown fields; caldera enforces both at
    admission and records them in annotations, so the object still says what applies.
    Volcano rejects a weight below 1: a caldera weight of 0 is rendered as 1. A department
    above the queue (DESIGN §2 "Hierarchy") is Volcano's hierarchical `spec.parent` (the
    Queue CRD has it from Volcano 1.10 on; tested against v1.14.1's webhook); a top-level
    queue names none, which Volcano reads as `root`.
    """
    annotations = {QUEUE_STATE: queue.state.value}
    if queue.time_windows:
        annotations[TIME_WINDOWS] = _windows_json(queue.time_windows)
    spec: dict[str, Any] = {"weight": max(queue.weight, 1), "reclaimable": queue.reclaimable}
    if queue.parent is not None:
        spec["parent"] = queue.parent
    deserved = queue.deserved
    if queue.guarantee is not None:
        # Volcano's queue webhook (>= 1.15) and its capacity plugin want guarantee <=
        # deserved <= capability in every resource: a guarantee without a deserved share
        # (caldera derives deserved from the weight) is rendered as deserved = guarantee.
        deserved = _at_least(deserved, queue.guarantee)
        if deserved != queue.deserved:  # caldera's own share, for reading it back
            own = resource_list(queue.deserved, settings.gpu_resource) if queue.deserved else {}
            annotations[DESERVED] = json.dumps(own, sort_keys=True)
    for key, quota in (("capability", queue.capability), ("deserved", deserved)):
        if quota is not None and resource_list(quota, settings.gpu_resource):
            spec[key] = resource_list(quota, settings.gpu_resource)
    if queue.guarantee is not None and resource_list(queue.guarantee, settings.gpu_resource):
        spec["guarantee"] = {"resource": resource_list(queue.guarantee, settings.gpu_resource)}
    return {
        "apiVersion": VOLCANO_SCHEDULING_API,
        "kind": "Queue",
        "metadata": {
            "name": queue.name,
            "labels": {MANAGED: "true"},
            "annotations": annotations,
        },
        "spec": spec,
    }


def _at_least(quota: Resources | None, floor: Resources) -> Resources:
    """`quota` raised to `floor` in every resource `floor` sets (unset: `floor` itself)."""
    if quota is None:
        return floor
    return Resources(
        max(quota.gpu, floor.gpu), max(quota.cpu, floor.cpu), max(quota.memory, floor.memory)
    )


def queue_from_volcano(obj: Mapping[str, Any], settings: KubeSettings) -> Queue:
    """A Volcano Queue read back as a caldera queue (for a controller run without a config:
    the cluster's queues are then the truth). The inverse of `volcano_queue`."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    state_text = str(annotations.get(QUEUE_STATE) or (obj.get("status") or {}).get("state") or "")
    known = {state.value for state in QueueState}
    state = QueueState(state_text) if state_text in known else None
    windows: tuple[TimeWindow, ...] = ()
    if TIME_WINDOWS in annotations:
        windows = tuple(
            TimeWindow(frozenset(w["days"]), float(w["hours"][0]), float(w["hours"][1]))
            for w in json.loads(annotations[TIME_WINDOWS])
        )

    def quota(values: Mapping[str, Any] | None) -> Any:
        return resources_from_list(dict(values), settings.gpu_resource) if values else None

    guarantee = spec.get("guarantee") or {}
    deserved = spec.get("deserved")
    if DESERVED in annotations:
        deserved = json.loads(annotations[DESERVED])
    return Queue(
        name=str(metadata["name"]),
        weight=int(spec.get("weight", 1)),
        deserved=quota(deserved),
        guarantee=quota(guarantee.get("resource")),
        capability=quota(spec.get("capability")),
        reclaimable=bool(spec.get("reclaimable", True)),
        state=state or QueueState.OPEN,
        time_windows=windows,
        parent=str(spec["parent"]) if spec.get("parent") not in (None, "", "root") else None,
    )


# -- a started job's gang -------------------------------------------------------------------


def job_labels(spec: JobSpec, attempt: int) -> dict[str, str]:
    """The labels on everything made for one attempt of a job (its PodGroup, its pods)."""
    return {
        MANAGED: "true",
        JOB: spec.name,
        JOB_TYPE: spec.type.value,
        QUEUE: spec.queue,
        ATTEMPT: str(attempt),
    }


def pod_group(
    spec: JobSpec,
    attempt: int,
    owner: Owner | None = None,
    started_under: Nomination | None = None,
    nodes: tuple[Node, ...] = (),
    settings: KubeSettings | None = None,
) -> dict[str, Any]:
    """The gang as Volcano sees it: `minMember` = min_available, queue and priority class."""
    settings = settings or KubeSettings()
    annotations = {JOB_ID: spec.id}
    if started_under is not None:
        # Which reservation the job started in and whose eviction freed it: for audits.
        annotations[NOMINATION] = json.dumps(
            nomination_to_wire(started_under, ByName(nodes)), separators=(",", ":"), sort_keys=True
        )
    metadata: dict[str, Any] = {
        "name": names.pod_group_name(spec.name, attempt),
        "namespace": spec.namespace,
        "labels": job_labels(spec, attempt),
        "annotations": annotations,
    }
    if owner is not None:
        metadata["ownerReferences"] = owner.reference()
    gang = spec.gang_request
    minimum = resource_list(gang, settings.gpu_resource)
    if 0 < spec.gpu < GPU_MILLI or spec.gpu_profile is not None:
        minimum.pop(settings.gpu_resource, None)  # a share is not a count of devices
    if spec.gpu_profile is not None:
        minimum[mig_resource(spec.gpu_profile, settings.gpu_resource)] = str(spec.min_available)
    group_spec: dict[str, Any] = {
        "minMember": spec.min_available,
        "queue": spec.queue,
        "priorityClassName": spec.priority_class.name,
    }
    if minimum:
        group_spec["minResources"] = minimum
    if spec.topology is not None:
        group_spec["networkTopology"] = {
            "mode": spec.topology.mode.value,
            "highestTierAllowed": spec.topology.highest_tier,
        }
    if spec.never_a_victim:
        # Volcano's own preempt/reclaim must not touch it. Volcano reads this annotation on
        # PodGroups and pods; no PodGroup CRD has a `spec.preemptable` field (issue 9,
        # defect 10), so one set there would be pruned.
        annotations[names.VOLCANO_PREEMPTABLE] = "false"
    return {
        "apiVersion": VOLCANO_SCHEDULING_API,
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": group_spec,
    }
