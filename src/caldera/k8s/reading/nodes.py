"""Kubernetes nodes as caldera `Node`s, and the room caldera may not use on them.

GPU count comes from `status.allocatable[gpu_resource]` (what the device plugin offers; the
`nvidia.com/gpu.count` label only when allocatable lacks it), the model and per-GPU memory
from GPU feature discovery's labels, the NVLink island size from `caldera.io/nvlink-island`
(default: one island per node) and the topology from `caldera.io/hypernode` (tier 1) and
`caldera.io/spine` (tier 2); all label names are settings. A node without a hypernode label
is a tier-1 domain of its own and one without a spine label a tier-2 domain of its own
(keyed by its tier-1 domain): a hard-topology gang never spans nodes nobody said were close.

MIG: with the device plugin's `mixed` strategy a node's MIG slices are their own resources,
`nvidia.com/mig-<profile>` in allocatable (one count per profile); they become the node's
slices, and `nvidia.com/gpu` counts only the GPUs not in MIG mode.

GPU health comes from the usual agents, never from caldera itself on Kubernetes:
- NVIDIA's device plugin marks a GPU with a critical XID unhealthy, and the kubelet drops it
  from `allocatable`: caldera, which reads allocatable, no longer offers it;
- a node cordoned by a remediation agent (NVSentinel's fault-quarantine cordons by default)
  is closed like any cordoned node;
- a node tainted NoSchedule/NoExecute with a key matching `HEALTH_TAINTS` (`nvidia.com/*`:
  NVSentinel's and the GPU operator's convention) or with a condition matching
  `HEALTH_CONDITIONS` set True (`Gpu*`, `GPU*`: NVSentinel's and node-problem-detector GPU
  plugins' condition types) is closed and reported in `NodeState.sick` with why.
A closed node starts nothing new; what runs there is moved off by the agent's drain (a
NoExecute taint evicts its pods), and the runtime requeues what it loses.

A node under one of Kubernetes' own condition taints (`node.kubernetes.io/*`, NoSchedule or
NoExecute: not-ready, unreachable, memory-pressure …) is closed too: the scheduler binds no
pod there that does not tolerate it, and the node lifecycle controller lifts a not-ready
taint only some time after the node turns Ready (seconds, more on a loaded control plane):
a pod pinned there meanwhile waits, and the scheduler writes a FailedScheduling Event for it
at every try (issue 40: 1,439 of them for 1,600 pods on 200 fresh nodes).

Nodes are ordered by name; a node's index is its position. Room caldera does not own —
pods it did not create, nodes that are cordoned or not Ready — is reported as `Blocked` so
the runtime can keep it out of the free-room index without ever offering it as a victim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase as fnmatch
from typing import Any

from caldera.k8s.reading.podtemplate import effective_requests
from caldera.k8s.reading.quantities import parse_capacity_mib, parse_count, parse_quantity
from caldera.k8s.settings import KubeSettings
from caldera.model import Node, parse_profile
from caldera.trainingjob_api import MANAGED

__all__ = [
    "HEALTH_CONDITIONS",
    "HEALTH_TAINTS",
    "Blocked",
    "NodeState",
    "condition_tainted",
    "foreign_usage",
    "pod_requests",
    "read_nodes",
]

HEALTH_TAINTS = ("nvidia.com/*",)
"""Taint keys (fnmatch patterns) that health agents set on nodes with sick GPUs."""
HEALTH_CONDITIONS = ("Gpu*", "GPU*")
"""Node condition types (fnmatch patterns) that say, when True, that a GPU is sick."""
NODE_CONDITION_TAINTS = "node.kubernetes.io/"
"""The prefix of the taints Kubernetes itself sets for a node's conditions."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """The nodes caldera schedules on, and which of them accept new pods."""

    nodes: tuple[Node, ...]
    closed: frozenset[str]  # cordoned or not Ready: hold what runs there, start nothing new
    sick: Mapping[str, str] = field(default_factory=dict)  # node → why its GPUs are sick

    @property
    def index(self) -> dict[str, int]:
        return {node.name: node.index for node in self.nodes}


@dataclass(frozen=True, slots=True)
class Blocked:
    """Room on one node that caldera must not hand out: whole GPUs, millicores, MiB, and pod
    slots (one per foreign pod: the node's `pods` allocatable counts every pod)."""

    gpus: int = 0
    cpu: int = 0
    memory: int = 0
    pods: int = 0


def _int_label(labels: Mapping[str, str], key: str) -> int:
    try:
        return max(int(float(labels.get(key, "0"))), 0)
    except ValueError:
        return 0


def _ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _sick(node: Mapping[str, Any], taints: Sequence[str], conditions: Sequence[str]) -> str:
    """Why a health agent says this node's GPUs are sick ("" when none does)."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        key = str(taint.get("key", ""))
        effect = taint.get("effect")
        if effect in ("NoSchedule", "NoExecute") and any(fnmatch(key, p) for p in taints):
            value = taint.get("value")
            return f"taint {key}{'=' + str(value) if value else ''}:{effect}"
    for condition in (node.get("status") or {}).get("conditions") or []:
        kind = str(condition.get("type", ""))
        if condition.get("status") == "True" and any(fnmatch(kind, p) for p in conditions):
            detail = condition.get("reason") or condition.get("message") or ""
            return f"condition {kind}" + (f" ({detail})" if detail else "")
    return ""


def condition_tainted(node: Mapping[str, Any]) -> bool:
    """Whether Kubernetes itself taints the node against new pods (see the module's
    docstring)."""
    return any(
        str(taint.get("key", "")).startswith(NODE_CONDITION_TAINTS)
        and taint.get("effect") in ("NoSchedule", "NoExecute")
        for taint in (node.get("spec") or {}).get("taints") or []
    )


def _slices(allocatable: Mapping[str, Any], gpu_resource: str) -> tuple[str, ...]:
    """MIG slices the device plugin's mixed strategy offers: nvidia.com/mig-<profile>: N."""
    prefix = gpu_resource.rsplit("/", 1)[0] + "/mig-"
    found: list[str] = []
    for key in sorted(allocatable):
        if not key.startswith(prefix):
            continue
        profile = key[len(prefix) :]
        try:
            parse_profile(profile)
            count = int(parse_count(allocatable[key]))
        except ValueError:
            continue  # a resource this reader does not understand: not caldera's to offer
        found.extend([profile] * count)
    return tuple(found)


def _pods(allocatable: Mapping[str, Any]) -> int:
    """How many pods the node takes (`pods` allocatable, 110 by the kubelet's default);
    0 (no limit) when it does not say or says something unreadable."""
    try:
        return int(parse_quantity(allocatable["pods"])) if "pods" in allocatable else 0
    except ValueError:
        return 0


def read_nodes(
    items: Iterable[Mapping[str, Any]],
    settings: KubeSettings,
    health_taints: Sequence[str] = HEALTH_TAINTS,
    health_conditions: Sequence[str] = HEALTH_CONDITIONS,
) -> NodeState:
    """Node objects (as the API returns them) into caldera's nodes, ordered by name."""
    keys = settings.labels
    rows = sorted(items, key=lambda n: str(n["metadata"]["name"]))
    tier1_ids: dict[str, int] = {}
    tier2_ids: dict[tuple[str, str], int] = {}
    nodes: list[Node] = []
    closed: set[str] = set()
    sick: dict[str, str] = {}
    for row in rows:
        name = str(row["metadata"]["name"])
        labels = row["metadata"].get("labels") or {}
        allocatable = (row.get("status") or {}).get("allocatable") or {}
        if settings.gpu_resource in allocatable:
            gpus = int(parse_count(allocatable[settings.gpu_resource]))
        else:
            gpus = _int_label(labels, keys.gpu_count)
        island = _int_label(labels, keys.nvlink_island)
        if not island or not gpus or gpus % island:
            island = gpus or 1  # unknown or inconsistent: one island spanning the node
        hypernode = labels.get(keys.hypernode)
        tier1_key = f"hypernode:{hypernode}" if hypernode else f"node:{name}"
        tier1 = tier1_ids.setdefault(tier1_key, len(tier1_ids))
        spine = labels.get(keys.spine)
        tier2_key = ("spine", spine) if spine else ("tier1", tier1_key)
        tier2 = tier2_ids.setdefault(tier2_key, len(tier2_ids))
        nodes.append(
            Node(
                index=len(nodes),
                name=name,
                gpus=gpus,
                gpu_model=str(labels.get(keys.gpu_model) or "GPU"),
                cpu=math.floor(parse_quantity(allocatable.get("cpu", 0)) * 1000),
                memory=parse_capacity_mib(allocatable.get("memory", "0")),
                island_size=island,
                tier1=tier1,
                tier2=tier2,
                gpu_memory=_int_label(labels, keys.gpu_memory),
                slices=_slices(allocatable, settings.gpu_resource),
                pods=_pods(allocatable),
            )
        )
        why = _sick(row, health_taints, health_conditions)
        if why:
            sick[name] = why
        unschedulable = (row.get("spec") or {}).get("unschedulable")
        if unschedulable or not _ready(row) or why or condition_tainted(row):
            closed.add(name)
    return NodeState(tuple(nodes), frozenset(closed), sick)


def pod_requests(pod: Mapping[str, Any], gpu_resource: str) -> tuple[int, int, int]:
    """(whole GPUs, millicores, MiB) a pod holds on its node, as the scheduler counts them
    (`caldera.k8s.reading.podtemplate.effective_requests`: containers and sidecars summed, the
    larger init container otherwise). ValueError on a quantity it cannot read."""
    asks = effective_requests(pod.get("spec") or {})
    return (
        math.ceil(asks.get(gpu_resource, 0)),
        math.ceil(asks.get("cpu", 0) * 1000),
        math.ceil(asks.get("memory", 0) / 2**20),
    )


def foreign_usage(
    pods: Iterable[Mapping[str, Any]], node_names: Iterable[str], settings: KubeSettings
) -> dict[str, Blocked]:
    """What pods caldera did not create hold on caldera's nodes (bound, not finished): their
    requests, and one pod slot each (issue 34: they counted as one slot per node). A pod is
    caldera's only in a namespace caldera serves: a label anyone can write elsewhere hides
    nothing."""
    wanted = set(node_names)
    usage: dict[str, list[int]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        # A pod that lost the label but is a job's comes with it restored
        # (caldera.k8s.observe.pods.claim_unlabelled).
        ours = (metadata.get("labels") or {}).get(MANAGED) == "true"
        if ours and (not settings.namespaces or metadata.get("namespace") in settings.namespaces):
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or node not in wanted or phase in ("Succeeded", "Failed"):
            continue
        try:
            gpu, cpu, memory = pod_requests(pod, settings.gpu_resource)
        except ValueError:  # a quantity this reader does not understand: not caldera's to
            gpu = cpu = memory = 0  # judge, but the pod takes its slot all the same
        totals = usage.setdefault(node, [0, 0, 0, 0])
        totals[0] += gpu
        totals[1] += cpu
        totals[2] += memory
        totals[3] += 1  # a pod slot, whatever it asks for
    return {node: Blocked(*values) for node, values in usage.items() if any(values)}
