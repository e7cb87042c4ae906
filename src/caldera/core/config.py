"""Policy settings a deployment may tune (scenario `policy:` / service config `policy:`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["DEFAULT_SLO", "PolicyConfig"]

DEFAULT_SLO: Mapping[str, float | None] = MappingProxyType(
    {"critical": 60.0, "large-job": 3600.0, "normal": 4 * 3600.0, "debug": None}
)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    name: str = "caldera"
    grace_period: float = 120.0
    throttle_timeout: float = 300.0
    cooldown: float = 600.0
    eviction_budget: float = 0.30  # share of the cluster's GPUs evictable per cycle
    alpha: float = 100.0  # weight of ln(1 + hours run)
    beta: float = 600.0  # weight of progress²
    ceiling: int = 800  # no non-critical effective weight rises above this
    emergency_checkpoint: bool = True  # victims may checkpoint on SIGTERM
    throttle: bool = True
    nomination_timeout: float = 1800.0  # a preemptor that cannot start by then re-plans
    slo: Mapping[str, float | None] = field(default_factory=lambda: DEFAULT_SLO)
