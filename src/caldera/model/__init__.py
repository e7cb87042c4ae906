"""The domain: resources, nodes and topology, queues, job types, jobs and their lifecycle.

Everything here is plain immutable data with no I/O; the scheduling core, every runtime and
the scenario loader build on it.
"""

from caldera.model.cluster import GPU_MILLI, Node, NodeGroup, expand_node_groups
from caldera.model.jobs import (
    Checkpointing,
    JobSpec,
    TopologyMode,
    TopologySpec,
)
from caldera.model.jobtypes import (
    CRITICAL_PRIORITY,
    ESCALATION_CEILING,
    PRIORITY_CLASSES,
    JobType,
    PreemptionPolicy,
    PriorityClass,
    priority_class,
)
from caldera.model.lifecycle import TRANSITIONS, IllegalTransition, JobState, check_transition
from caldera.model.mig import MigProfile, parse_profile, slice_milli
from caldera.model.queues import Queue, QueueState, TimeWindow, deserved_shares
from caldera.model.resources import Resources, parse_cpu, parse_gpu_milli, parse_memory_mib
from caldera.model.sharing import MAX_TIME_SHARING, shares_time, time_share

__all__ = [
    "CRITICAL_PRIORITY",
    "ESCALATION_CEILING",
    "GPU_MILLI",
    "MAX_TIME_SHARING",
    "PRIORITY_CLASSES",
    "TRANSITIONS",
    "Checkpointing",
    "IllegalTransition",
    "JobSpec",
    "JobState",
    "JobType",
    "MigProfile",
    "Node",
    "NodeGroup",
    "PreemptionPolicy",
    "PriorityClass",
    "Queue",
    "QueueState",
    "Resources",
    "TimeWindow",
    "TopologyMode",
    "TopologySpec",
    "check_transition",
    "deserved_shares",
    "expand_node_groups",
    "parse_cpu",
    "parse_gpu_milli",
    "parse_memory_mib",
    "parse_profile",
    "priority_class",
    "shares_time",
    "slice_milli",
    "time_share",
]
