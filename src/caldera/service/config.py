"""The service's configuration file (DESIGN §8): queues, API tokens and policy settings.

Queue and policy keys are the scenario's (`caldera.sim.scenario`), so one queue definition
means the same thing to the simulator and to the service. A token names a user, the queues it
may submit to (`"*"`: all), whether it may submit `critical` jobs and whether it is an admin.
Any problem is a `ConfigError` whose message is one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from caldera.core import UNIX_WEEK_OFFSET, PolicyConfig
from caldera.model import Queue
from caldera.service.gpus.health import HealthSettings
from caldera.service.gpus.watch import GpuHealthModel, health_settings
from caldera.sim.scenario import PolicyModel, QueueModel, build_queue, policy_config

__all__ = [
    "ConfigError",
    "Principal",
    "ServiceConfig",
    "TokenModel",
    "default_config",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """The configuration cannot be used. The message is one line, meant for the user."""


class TokenModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=8)
    user: str = Field(min_length=1)
    queues: list[str] = Field(default_factory=lambda: ["*"])
    critical: bool = False
    admin: bool = False


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queues: list[QueueModel] = Field(default_factory=list)
    tokens: list[TokenModel] = Field(default_factory=list)
    policy: PolicyModel = Field(default_factory=PolicyModel)
    # Seconds between two looks at the running processes and the SDK's status files.
    poll_interval: float = Field(default=0.1, gt=0, le=10)
    # Least seconds between two cycles triggered by submissions (bursts share one cycle).
    cycle_gap: float = Field(default=0.05, ge=0, le=10)
    # Polling this host's GPUs for XID/ECC errors, heat and lost devices (docs/gpus.md).
    gpu_health: GpuHealthModel = Field(default_factory=GpuHealthModel)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: what a bearer token grants."""

    user: str
    queues: frozenset[str]
    critical: bool = False
    admin: bool = False

    def may_use(self, queue: str) -> bool:
        return self.admin or "*" in self.queues or queue in self.queues


@dataclass(frozen=True)
class ServiceConfig:
    queues: tuple[Queue, ...]
    tokens: dict[str, Principal]
    policy: PolicyConfig
    poll_interval: float = 0.1
    cycle_gap: float = 0.05
    gpu_health: HealthSettings | None = field(default_factory=HealthSettings)  # None: off


def default_config(token: str, user: str = "admin") -> dict[str, Any]:
    """Without a file: one queue `default` and one admin token (made once per data dir)."""
    return {
        "queues": [{"name": "default", "weight": 1, "reclaimable": True}],
        "tokens": [
            {"token": token, "user": user, "queues": ["*"], "critical": True, "admin": True}
        ],
    }


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    return f"{where}: {message}"


def parse_config(data: Any) -> ServiceConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a mapping with queues, tokens and policy")
    try:
        model = ConfigModel.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_one_line(error)) from None
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
    except (KeyError, ValueError) as error:
        message = error.args[0] if error.args else str(error)
        raise ConfigError(str(message).splitlines()[0]) from None
    # The service runs on Unix time: time windows need seconds since a Monday.
    policy = replace(policy, week_offset=UNIX_WEEK_OFFSET)
    tokens = {
        t.token: Principal(t.user, frozenset(t.queues), t.critical, t.admin) for t in model.tokens
    }
    return ServiceConfig(
        queues,
        tokens,
        policy,
        model.poll_interval,
        model.cycle_gap,
        health_settings(model.gpu_health),
    )


def _duplicate(names: list[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return ""


def load_config(path: Path) -> ServiceConfig:
    """Read and validate a YAML config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror or error}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    try:
        return parse_config(data)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
