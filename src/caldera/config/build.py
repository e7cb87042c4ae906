"""From the configuration schema to the domain: queues, the policy's settings, principals.

`parse_deployment` checks what the models alone cannot (duplicate queue names or tokens, a
token naming an unknown queue) and raises `ConfigError` with one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from caldera.config.schema import DeploymentModel, PolicyModel, QueueModel, QuotaModel
from caldera.core import DEFAULT_SLO, UNIX_WEEK_OFFSET, PolicyConfig
from caldera.errors import ConfigError
from caldera.model import (
    GPU_MILLI,
    Queue,
    QueueState,
    Resources,
    TimeWindow,
    parse_cpu,
    parse_memory_mib,
)
from caldera.model.queues import tree_problem
from caldera.policies import get_policy

__all__ = [
    "Deployment",
    "Principal",
    "build_queue",
    "one_line",
    "parse_deployment",
    "policy_config",
    "read_yaml",
]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: what a bearer token grants."""

    user: str
    queues: frozenset[str]
    critical: bool = False
    admin: bool = False
    # May set protection labels (`protected`, `caldera.io/…`): immunity from preemption.
    protect: bool = False
    # The job's own claims of progress (reported, or from expected_duration) count in W_eff.
    trust_progress: bool = False

    def may_use(self, queue: str) -> bool:
        return self.admin or "*" in self.queues or queue in self.queues


@dataclass(frozen=True)
class Deployment:
    """Queues, tokens and policy settings of a service or a controller (Unix time)."""

    queues: tuple[Queue, ...]
    tokens: dict[str, Principal]
    policy: PolicyConfig


def build_queue(model: QueueModel) -> Queue:
    def quota(q: QuotaModel | None) -> Resources | None:
        if q is None:
            return None
        return Resources(
            gpu=round(q.gpu * GPU_MILLI) if q.gpu is not None else 0,
            cpu=parse_cpu(q.cpu) if q.cpu is not None else 0,
            memory=parse_memory_mib(q.memory) if q.memory is not None else 0,
        )

    return Queue(
        name=model.name,
        weight=model.weight,
        deserved=quota(model.deserved),
        guarantee=quota(model.guarantee),
        capability=quota(model.capability),
        reclaimable=model.reclaimable,
        state=QueueState(model.state),
        critical_allowed=model.critical_allowed,
        time_sharing=model.time_sharing,
        parent=model.parent,
        time_windows=tuple(
            TimeWindow(frozenset(w.days), w.hours[0], w.hours[1]) for w in model.time_windows
        ),
    )


def policy_config(model: PolicyModel) -> PolicyConfig:
    """The named policy's defaults with the model's explicit overrides; NotFound for an
    unknown policy name."""
    policy = get_policy(model.name)
    config = policy.defaults(PolicyConfig(name=model.name))
    overrides = {
        key: value
        for key, value in model.model_dump(exclude={"name", "slo", "fair_share"}).items()
        if value is not None
    }
    if model.fair_share is not None:
        overrides["fair_share_half_life"] = model.fair_share.half_life
    if model.slo is not None:
        overrides["slo"] = {**DEFAULT_SLO, **model.slo}
    return replace(config, **overrides)


def one_line(error: ValidationError, under: str = "") -> str:
    """A pydantic error as `dotted.where: what` (the first problem only); `under` prefixes
    the place of a model validated on its own (a section of a larger file)."""
    first = error.errors()[0]
    place = (under, *first["loc"]) if under else tuple(first["loc"])
    where = ".".join(str(part) for part in place) or "(top level)"
    message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    return f"{where}: {message}"


def parse_deployment(model: DeploymentModel) -> Deployment:
    """Check and build a validated model; ConfigError (one line) when it cannot be used."""
    names = [q.name for q in model.queues]
    if not names:
        raise ConfigError("queues: at least one queue is required")
    if len(set(names)) != len(names):
        raise ConfigError(f"queues: duplicate queue name {_duplicate(names)!r}")
    secrets = [t.token for t in model.tokens]
    if len(set(secrets)) != len(secrets):
        raise ConfigError("tokens: the same token is listed twice")
    for i, token in enumerate(model.tokens):
        unknown = [q for q in token.queues if q != "*" and q not in names]
        if unknown:
            raise ConfigError(f"tokens.{i}.queues: unknown queue {unknown[0]!r}")
    try:
        policy = policy_config(model.policy)
        queues = tuple(build_queue(q) for q in model.queues)
        problem = tree_problem(queues)
        if problem is not None:
            raise ValueError(f"queues: {problem}")
    except (LookupError, ValueError) as error:
        message = error.args[0] if error.args else str(error)
        raise ConfigError(str(message).splitlines()[0]) from None
    # Services and controllers run on Unix time: time windows need seconds since a Monday.
    policy = replace(policy, week_offset=UNIX_WEEK_OFFSET)
    tokens = {
        t.token: Principal(
            t.user, frozenset(t.queues), t.critical, t.admin, t.protect, t.trust_progress
        )
        for t in model.tokens
    }
    return Deployment(queues, tokens, policy)


def _duplicate(names: list[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return ""


def read_yaml(path: Path) -> Any:
    """A YAML file's document; ConfigError naming the file when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror or error}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
