"""A scenario as every reader receives it: the cluster, the queues, the submissions and the
policy settings (DESIGN §6). Files are parsed by `caldera.sim.scenario`; the Kubernetes
renderer and the benchmarks take the parsed form, so none of them imports the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from caldera.config.build import policy_config
from caldera.config.schema import PolicyModel
from caldera.core import PolicyConfig
from caldera.model import JobSpec, Node, Queue

__all__ = ["Scenario", "Submission"]


@dataclass(frozen=True, slots=True)
class Submission:
    """A job as the simulator submits it. `invalid`: why it must be rejected, if it must."""

    spec: JobSpec
    invalid: str | None = None
    cancel_at: float | None = None


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    submissions: tuple[Submission, ...]
    config: PolicyConfig
    until: float | None = None
    name: str = "scenario"
    overrides: dict[str, Any] = field(default_factory=dict)
    warmup: float = 0.0  # metrics count from here on (workload.warmup)

    def with_policy(self, name: str) -> Scenario:
        """The same cluster and workload under another policy; explicit overrides are kept
        only for the policy the file named."""
        if name == self.config.name:
            return self
        return replace(self, config=policy_config(PolicyModel(name=name)))
