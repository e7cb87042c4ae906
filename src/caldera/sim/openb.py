"""The Alibaba OpenB GPU trace (cluster-trace-gpu-v2023) as a scenario workload.

    workload:
      trace: {format: openb, nodes: PATH, pods: PATH}     # paths relative to the scenario

Nodes (`sn, cpu_milli, memory_mib, gpu, model`):
- nodes of one hardware kind (model, GPUs, CPU, memory) form one node group and keep their
  trace names; groups come in order of first appearance, nodes in file order inside a group;
- the trace has no topology. Assumed: one NVLink island per node (no island constraint
  inside a node), tier-1 domains of `nodes_per_tier1` (default 8) consecutive nodes of one
  kind, one tier-2 domain per kind unless `tier1_per_tier2` says otherwise. OpenB pods are
  single tasks without topology constraints, so this only shapes where victims are searched;
- CPU-only nodes (`gpu` 0, no model, in the all-node list) get the GPU model `cpu-only`.

Pods (`name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, creation_time,
deletion_time, …`), each one single-task job named after the pod:
- GPUs: `num_gpu` whole devices, or — for `num_gpu == 1` — `gpu_milli` thousandths of one
  shared device (GPU sharing); `num_gpu == 0` is a CPU-only pod (kept, or dropped with
  `cpu_only: skip`);
- `gpu_spec` (`|`-separated models, empty = any) becomes the job's `gpu_model` constraint;
- job type from `qos` (`QOS_TYPES`; override with `qos_map`): LS (latency-sensitive online
  services) → critical, Guaranteed and Burstable → normal, BE (best effort) → debug; an
  unknown or empty `qos` is normal;
- submit = `creation_time`, duration = `deletion_time − creation_time` (0 when negative),
  both multiplied by `time_scale`. Pods whose phase was Pending or Failed are replayed like
  the others: they are demand the cluster saw, and the trace gives their lifetime;
- the trace says nothing of checkpoints: by default pods never checkpoint and do not save on
  SIGTERM, so an evicted pod loses everything since it started, under every policy
  (`checkpoint_interval`, `checkpoint_cost`, `checkpoint_on_sigterm` change that);
- `expected_duration: true` tells the scheduler each pod's lifetime (off by default: a
  scheduler does not know it).

Pod lists without time columns (`openb_pod_list_multigpu20.csv`, which also lacks `qos` and
`gpu_spec`): its first 8,152 pods are the default list's pods, identical, plus 172 extra
multi-GPU pods. Such a list borrows creation and deletion times — and `qos` and `gpu_spec`
when it lacks those columns — by pod name from `times` (default: `openb_pod_list_default.csv`
beside it); pods not found there take them from a pod drawn at random (seeded by `seed`)
among those found, so the extra pods follow the trace's arrivals, lifetimes and QoS mix.

All pods go to one queue (`queue`, default `openb`), created unless the scenario declares it.

MIG (the trace has none; seed 004 runs inference on MIG slices): `mig: [{model: G2, nodes: 100,
layout: [{gpus: 4, slices: {1g.10gb: 7}}]}]` puts the first 100 `G2` nodes' last 4 GPUs in
MIG mode, and `share_profiles: true` replays each GPU-share pod (`num_gpu` 1, `gpu_milli` below
1000) as a request for the smallest declared profile whose GPU-equivalent holds its share
(caldera.model.mig), when there is one — the rest stay shares.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from caldera.config import Submission
from caldera.model import (
    Checkpointing,
    JobSpec,
    JobType,
    NodeGroup,
    Queue,
    slice_milli,
)
from caldera.sim.workload import Workload

if TYPE_CHECKING:
    from caldera.sim.scenario import TraceModel

__all__ = [
    "CPU_ONLY_MODEL",
    "DEFAULT_QUEUE",
    "QOS_TYPES",
    "OpenBPod",
    "load_openb",
    "read_nodes",
    "read_pods",
]

QOS_TYPES: dict[str, JobType] = {
    "LS": JobType.CRITICAL,
    "Guaranteed": JobType.NORMAL,
    "Burstable": JobType.NORMAL,
    "BE": JobType.DEBUG,
}
"""`qos` → job type: latency-sensitive services are critical, best effort is debug."""

CPU_ONLY_MODEL = "cpu-only"
DEFAULT_QUEUE = "openb"
_DEFAULT_TIMES = "openb_pod_list_default.csv"
_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


@dataclass(frozen=True, slots=True)
class OpenBPod:
    """One row of a pod list; times are None in a list without time columns."""

    name: str
    cpu: int
    memory: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str
    qos: str
    creation: float | None
    deletion: float | None


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[dict[str, str]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"workload.trace: {path}: no such file") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"workload.trace: {path.name}: missing column(s) {', '.join(missing)}")
        yield from reader


def _int(row: dict[str, str], column: str, path: Path, line: int) -> int:
    text = (row.get(column) or "").strip()
    try:
        return int(float(text)) if text else 0
    except ValueError:
        raise ValueError(
            f"workload.trace: {path.name} line {line}: {column} is not a number ({text!r})"
        ) from None


def _time(row: dict[str, str], column: str) -> float | None:
    text = (row.get(column) or "").strip()
    return float(text) if text else None


def read_nodes(path: Path, nodes_per_tier1: int = 8, tier1_per_tier2: int = 0) -> list[NodeGroup]:
    """Node groups, one per hardware kind, keeping the trace's node names."""
    kinds: dict[tuple[str, int, int, int], list[str]] = {}
    for line, row in enumerate(_rows(path, _NODE_COLUMNS), start=2):
        gpus = _int(row, "gpu", path, line)
        model = (row.get("model") or "").strip() or (CPU_ONLY_MODEL if gpus == 0 else "GPU")
        key = (model, gpus, _int(row, "cpu_milli", path, line), _int(row, "memory_mib", path, line))
        kinds.setdefault(key, []).append(row["sn"].strip())
    if not kinds:
        raise ValueError(f"workload.trace: {path.name}: no nodes")
    return [
        NodeGroup(
            prefix=f"{model.lower()}-{gpus}g",
            count=len(names),
            gpus=gpus,
            gpu_model=model,
            cpu=cpu,
            memory=memory,
            nvlink_island=0,
            nodes_per_tier1=nodes_per_tier1,
            tier1_per_tier2=tier1_per_tier2,
            names=tuple(names),
        )
        for (model, gpus, cpu, memory), names in kinds.items()
    ]


def _header(path: Path) -> set[str]:
    with path.open(newline="", encoding="utf-8") as handle:
        return set(next(csv.reader(handle), []))


def read_pods(path: Path) -> list[OpenBPod]:
    pods = []
    for line, row in enumerate(_rows(path, _POD_COLUMNS), start=2):
        pods.append(
            OpenBPod(
                name=row["name"].strip(),
                cpu=_int(row, "cpu_milli", path, line),
                memory=_int(row, "memory_mib", path, line),
                num_gpu=_int(row, "num_gpu", path, line),
                gpu_milli=_int(row, "gpu_milli", path, line),
                gpu_spec=(row.get("gpu_spec") or "").strip(),
                qos=(row.get("qos") or "").strip(),
                creation=_time(row, "creation_time"),
                deletion=_time(row, "deletion_time"),
            )
        )
    return pods


def _complete(
    pods: list[OpenBPod], model: TraceModel, pods_path: Path, base: Path
) -> list[OpenBPod]:
    """Pods with times (and, where the list lacks the columns, `qos` and `gpu_spec`) taken
    by name from a timed list; pods missing there take a seeded draw from those found."""
    columns = _header(pods_path)
    if {"creation_time", "deletion_time"} <= columns and all(
        p.creation is not None and p.deletion is not None for p in pods
    ):
        return pods
    times_path = base / model.times if model.times else pods_path.parent / _DEFAULT_TIMES
    if not times_path.is_file():
        raise ValueError(
            f"workload.trace: {pods_path.name} has no creation/deletion times; give "
            "trace.times: a pod list with them"
        )
    known = {
        p.name: p
        for p in read_pods(times_path)
        if p.creation is not None and p.deletion is not None
    }
    if not known:
        raise ValueError(f"workload.trace: {times_path.name} has no creation/deletion times")
    rng = random.Random(model.seed)
    pool = list(known.values())
    borrow_qos = "qos" not in columns
    borrow_spec = "gpu_spec" not in columns
    completed = []
    for pod in pods:
        if pod.creation is not None and pod.deletion is not None:
            completed.append(pod)
            continue
        source = known.get(pod.name) or rng.choice(pool)
        completed.append(
            replace(
                pod,
                creation=source.creation,
                deletion=source.deletion,
                qos=source.qos if borrow_qos else pod.qos,
                gpu_spec=source.gpu_spec if borrow_spec else pod.gpu_spec,
            )
        )
    return completed


def _gpu_milli(pod: OpenBPod) -> int:
    if pod.num_gpu <= 0:
        return 0
    if pod.num_gpu == 1 and 0 < pod.gpu_milli < 1000:
        return pod.gpu_milli  # a share of one device
    return pod.num_gpu * 1000


def _with_mig(groups: tuple[NodeGroup, ...], model: TraceModel) -> tuple[NodeGroup, ...]:
    """Split off the nodes `model.mig` puts in MIG mode into groups of their own."""
    from caldera.sim.scenario import mig_layouts

    result = list(groups)
    for entry in model.mig:
        wanted = entry.nodes
        layouts = mig_layouts(entry.layout)
        for i, group in enumerate(result):
            if wanted == 0 or group.gpu_model != entry.model or group.mig:
                continue
            take = min(wanted, group.count)
            mig = replace(
                group,
                prefix=f"{group.prefix}-mig",
                count=take,
                names=group.names[:take],
                mig=layouts,
            )
            rest = replace(group, count=group.count - take, names=group.names[take:])
            result[i : i + 1] = [mig, rest] if rest.count else [mig]
            wanted -= take
        if wanted:
            raise ValueError(
                f"workload.trace.mig: {entry.nodes} nodes of model {entry.model!r} asked, "
                f"{entry.nodes - wanted} in the trace"
            )
    return tuple(result)


def load_openb(model: TraceModel, base: Path) -> Workload:
    """Read the trace's nodes (if given) and pods into node groups, a queue and submissions."""
    qos_types = {**QOS_TYPES, **(model.qos_map or {})}
    queue = model.queue or DEFAULT_QUEUE
    groups: tuple[NodeGroup, ...] = ()
    if model.nodes is not None:
        groups = tuple(read_nodes(base / model.nodes, model.nodes_per_tier1, model.tier1_per_tier2))
    groups = _with_mig(groups, model)
    profiles = sorted(
        {p for g in groups for layout in g.mig for p in layout}, key=lambda p: (slice_milli(p), p)
    )
    pods_path = base / model.pods
    pods: list[OpenBPod] = _complete(read_pods(pods_path), model, pods_path, base)
    checkpoint = Checkpointing(
        model.checkpoint_interval, model.checkpoint_cost, model.checkpoint_on_sigterm
    )
    scale = model.time_scale
    submissions: list[Submission] = []
    for pod in pods:
        creation, deletion = pod.creation or 0.0, pod.deletion or 0.0
        gpu = _gpu_milli(pod)
        if gpu == 0 and model.cpu_only == "skip":
            continue
        duration = max(deletion - creation, 0.0) * scale
        models = frozenset(m.strip() for m in pod.gpu_spec.split("|") if m.strip()) or None
        profile = None
        if model.share_profiles and 0 < gpu < 1000:
            profile = next((p for p in profiles if slice_milli(p) >= gpu), None)
        spec = JobSpec(
            id=pod.name,
            name=pod.name,
            queue=queue,
            type=qos_types.get(pod.qos, JobType.NORMAL),
            submit=creation * scale,
            tasks=1,
            gpu=gpu,
            cpu=pod.cpu,
            memory=pod.memory,
            checkpoint=checkpoint,
            expected_duration=duration if model.expected_duration and duration > 0 else None,
            gpu_models=models,
            duration=duration,
            gpu_profile=profile,
        )
        submissions.append(Submission(spec))
        if model.limit is not None and len(submissions) >= model.limit:
            break
    return Workload(tuple(submissions), groups, (Queue(name=queue),))
