"""The side-by-side bench's workload and how each mode's users submit it: the runtimes
(`SideMode`), the jobs' sizes (seeded: single-pod jobs and gangs of GANG_MIN..GANG_MAX), and
the objects sent — plain pods for kube-scheduler, a PodGroup and its pods for Volcano, a
Volcano Job for Volcano's job controller, a TrainingJob for caldera's controller; in the
preemption case at a low or high priority."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from functools import partial
from typing import Any

import kubernetes

from caldera.bench.kube.cluster import IMAGE, QUEUE, create_retrying
from caldera.bench.kube.watch import BENCH_JOB, NAMESPACE
from caldera.k8s import names
from caldera.trainingjob_api import API_VERSION, GROUP, KIND, PLURAL, VERSION

__all__ = [
    "GANG_MAX",
    "GANG_MIN",
    "HIGH",
    "LOW",
    "PRIORITY",
    "SideMode",
    "gang_sizes",
    "submit",
    "volcano_job",
    "workload",
]

k8s: Any = kubernetes
GANG_MIN, GANG_MAX = 8, 64
LOW, HIGH = "bench-low", "bench-high"  # the preemption case's PriorityClasses
PRIORITY = {LOW: 100, HIGH: 100000}
JOB_TYPE = {LOW: "normal", HIGH: "large-job"}  # what caldera's users ask for instead
VOLCANO_MAX_RETRY = 3  # what Volcano's job webhook writes where a Job says none (v1.14)


class SideMode(Enum):
    """A runtime the workload goes through."""

    KUBE_SCHEDULER = "kube-scheduler"
    VOLCANO = "volcano"  # PodGroups and pods
    VOLCANO_JOB = "volcano-job"  # Volcano Jobs
    CALDERA = "caldera"
    CALDERA_VOLCANO = "caldera-volcano"

    @property
    def needs_volcano(self) -> bool:
        return self.volcano_alone or self is SideMode.CALDERA_VOLCANO

    @property
    def volcano_alone(self) -> bool:
        """Volcano's own users submit: the bench opens Volcano's queue `bench` itself, and
        vc-scheduler runs seed 001's configuration (caldera's controller, in front of it,
        opens its own queues and configures it as docs/kubernetes.md says)."""
        return self in (SideMode.VOLCANO, SideMode.VOLCANO_JOB)

    @property
    def controller(self) -> bool:
        """caldera's controller creates the pods (from TrainingJobs)."""
        return self in (SideMode.CALDERA, SideMode.CALDERA_VOLCANO)

    @property
    def scheduler_name(self) -> str:
        return "volcano" if self.needs_volcano else "default-scheduler"


def workload(pods: int, gang_share: float, seed: int) -> list[int]:
    """The jobs' sizes in submission order: gangs of GANG_MIN..GANG_MAX tasks (never more than
    the gang share has left) until `gang_share` of the pods are in gangs, the rest single-pod
    jobs, shuffled with `seed` so gangs arrive among the singles."""
    rng = random.Random(seed)
    left = int(pods * gang_share)
    sizes: list[int] = []
    while left >= GANG_MIN:
        size = rng.randint(GANG_MIN, min(GANG_MAX, left))
        sizes.append(size)
        left -= size
    sizes += [1] * (pods - sum(sizes))
    rng.shuffle(sizes)
    return sizes


def gang_sizes(gangs: int, seed: int) -> list[int]:
    """`gangs` gang sizes of GANG_MIN..GANG_MAX tasks, seeded: the preemption case's jobs."""
    rng = random.Random(seed)
    return [rng.randint(GANG_MIN, GANG_MAX) for _ in range(gangs)]


def _pod_spec(gpus: int, mode: SideMode, priority: str | None = None) -> dict[str, Any]:
    """What the bench asks of every pod it (or Volcano's job controller) creates."""
    spec: dict[str, Any] = {
        "schedulerName": mode.scheduler_name,
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if priority is not None:
        spec["priorityClassName"] = priority
        spec["terminationGracePeriodSeconds"] = 1  # as caldera's victims in this case
    return spec


def _plain_pod(
    job: str, rank: int, gpus: int, mode: SideMode, priority: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{job}-{rank}", "labels": {BENCH_JOB: job}}
    if mode is SideMode.VOLCANO:
        meta["annotations"] = {names.GROUP_NAME: job}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": _pod_spec(gpus, mode, priority),
    }


def _volcano_object(
    api_version: str, kind: str, job: str, spec: dict[str, Any], priority: str | None
) -> dict[str, Any]:
    """One of Volcano's objects named after the job, at `priority` when given."""
    if priority is not None:
        spec["priorityClassName"] = priority
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": job}, "spec": spec}


def _pod_group(job: str, size: int, priority: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": size, "queue": QUEUE}
    return _volcano_object("scheduling.volcano.sh/v1beta1", "PodGroup", job, spec, priority)


def volcano_job(job: str, size: int, gpus: int, priority: str | None = None) -> dict[str, Any]:
    """A Volcano Job as its users write it: one task `worker` of `size` replicas, all needed
    (`minAvailable`, the job's and the task's), in the queue `bench`, bound by vc-scheduler;
    its pod template the volcano mode's pod (the bench's job label: the pods Volcano's job
    controller creates, `JOB-worker-RANK`, carry the template's labels, and the watch finds
    them by it). What Volcano v1.14's admission webhook would default is written out (no
    vc-webhook-manager in the bench's cluster): the scheduler, the queue, `minAvailable`,
    `maxRetry` 3 (job and task) and the task's name. No `policies`: the job controller's
    default action, a pod gone is created again, is what a Volcano user gets."""
    template = {
        "metadata": {"labels": {BENCH_JOB: job}},
        "spec": _pod_spec(gpus, SideMode.VOLCANO_JOB, priority),
    }
    spec: dict[str, Any] = {
        "schedulerName": SideMode.VOLCANO_JOB.scheduler_name,
        "queue": QUEUE,
        "minAvailable": size,
        "maxRetry": VOLCANO_MAX_RETRY,
        "tasks": [
            {
                "name": "worker",
                "replicas": size,
                "minAvailable": size,
                "maxRetry": VOLCANO_MAX_RETRY,
                "template": template,
            }
        ],
    }
    return _volcano_object("batch.volcano.sh/v1alpha1", "Job", job, spec, priority)


def _training_job(job: str, size: int, gpus: int, priority: str | None = None) -> dict[str, Any]:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job},
        "spec": {
            "type": JOB_TYPE[priority] if priority else "normal",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": size,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }


def submit(
    api: Any,
    mode: SideMode,
    sizes: Sequence[int],
    gpus: int,
    submitters: int,
    sent: dict[str, float],
    prefix: str = "job",
    priority: str | None = None,
) -> None:
    """Submit every job as `mode`'s users would, named `prefix-00000`…, at `priority` (the
    preemption case); `sent`: when each job's first object was sent."""
    core = k8s.client.CoreV1Api(api)
    custom = k8s.client.CustomObjectsApi(api)

    def create(group: str, version: str, plural: str, body: dict[str, Any]) -> None:
        create_retrying(
            partial(custom.create_namespaced_custom_object, group, version, NAMESPACE, plural, body)
        )

    def one(i: int) -> None:
        job, size = f"{prefix}-{i:05d}", sizes[i]
        sent[job] = time.monotonic()
        if mode.controller:
            create(GROUP, VERSION, PLURAL, _training_job(job, size, gpus, priority))
            return
        if mode is SideMode.VOLCANO_JOB:
            create("batch.volcano.sh", "v1alpha1", "jobs", volcano_job(job, size, gpus, priority))
            return
        if mode is SideMode.VOLCANO:
            group = _pod_group(job, size, priority)
            create("scheduling.volcano.sh", "v1beta1", "podgroups", group)
        for rank in range(size):
            pod = _plain_pod(job, rank, gpus, mode, priority)
            create_retrying(partial(core.create_namespaced_pod, NAMESPACE, pod))

    with ThreadPoolExecutor(submitters, thread_name_prefix="bench-submit") as pool:
        for done in [pool.submit(one, i) for i in range(len(sizes))]:
            done.result()
