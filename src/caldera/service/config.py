"""The service's configuration file (DESIGN §8): queues, API tokens and policy settings.

Queue, policy and token keys are the shared schema (`caldera.config`), so one queue
definition means the same thing to the simulator, the service and the Kubernetes controller;
this module builds the service's settings from the file. Any problem is a `ConfigError`
whose message is one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from caldera.config import ConfigFileModel, Principal, one_line, parse_deployment, read_yaml
from caldera.core import PolicyConfig
from caldera.errors import ConfigError
from caldera.model import Queue
from caldera.service.gpus.health import HealthSettings
from caldera.service.gpus.watch import GpuHealthModel, health_settings
from caldera.service.isolation import IsolationModel, LogsModel
from caldera.service.limits import Limits

__all__ = [
    "ConfigError",
    "Principal",
    "ServiceConfig",
    "default_config",
    "load_config",
    "parse_config",
]


@dataclass(frozen=True)
class ServiceConfig:
    queues: tuple[Queue, ...]
    tokens: dict[str, Principal]
    policy: PolicyConfig
    poll_interval: float = 0.1
    cycle_gap: float = 0.05
    gpu_health: HealthSettings | None = field(default_factory=HealthSettings)  # None: off
    isolation: IsolationModel = field(default_factory=IsolationModel)
    logs: LogsModel = field(default_factory=LogsModel)
    limits: Limits = field(default_factory=Limits)


def default_config(token: str, user: str = "admin") -> dict[str, Any]:
    """Without a file: one queue `default` and one admin token (made once per data dir)."""
    return {
        "queues": [{"name": "default", "weight": 1, "reclaimable": True}],
        "tokens": [
            {"token": token, "user": user, "queues": ["*"], "critical": True, "admin": True}
        ],
    }


def parse_config(data: Any) -> ServiceConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a mapping with queues, tokens and policy")
    try:
        model = ConfigFileModel.model_validate(data)
    except ValidationError as error:
        raise ConfigError(one_line(error)) from None
    deployment = parse_deployment(model)
    try:
        health = GpuHealthModel.model_validate(model.gpu_health)
    except ValidationError as error:
        raise ConfigError(one_line(error, under="gpu_health")) from None
    sections: dict[str, Any] = {}
    for name, section in (("isolation", IsolationModel), ("logs", LogsModel), ("limits", Limits)):
        try:
            sections[name] = section.model_validate(getattr(model, name))
        except ValidationError as error:
            raise ConfigError(one_line(error, under=name)) from None
    return ServiceConfig(
        deployment.queues,
        deployment.tokens,
        deployment.policy,
        model.poll_interval,
        model.cycle_gap,
        health_settings(health),
        **sections,
    )


def load_config(path: Path) -> ServiceConfig:
    """Read and validate a YAML config file."""
    data = read_yaml(path)
    try:
        return parse_config(data)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
