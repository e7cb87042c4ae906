"""Reading the files `caldera k8s` takes: a service config (+ `kubernetes:`) or a scenario.

`caldera k8s run --config FILE` reads the service's configuration (DESIGN §8: queues and
policy mean the same to every runtime; `tokens` are the service's and are ignored here) plus
an optional `kubernetes:` section (`caldera.k8s.settings`). Without queues in the file, the
cluster's Volcano Queues are the truth (see `caldera.k8s.effects.render.queue_from_volcano`).

`caldera k8s render FILE` also takes a scenario (DESIGN §6): its cluster and jobs show what
the first cycle would start on an empty cluster of that shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from caldera.config import (
    ConfigFileModel,
    PolicyModel,
    Scenario,
    one_line,
    parse_deployment,
    policy_config,
    read_yaml,
)
from caldera.core import UNIX_WEEK_OFFSET, PolicyConfig
from caldera.errors import ConfigError, KubeConfigError, ScenarioError
from caldera.k8s.settings import KubeSettings, KubeSettingsModel, settings_from_model
from caldera.model import Queue

__all__ = [
    "KubeConfig",
    "KubeConfigError",
    "ScenarioParser",
    "load_kube_config",
    "load_render_input",
    "parse_kube_config",
]

_SCENARIO_KEYS = frozenset({"cluster", "jobs", "workload", "until"})

# Reads a decoded scenario document (`caldera.sim.parse_scenario`): the caller passes it in,
# so this runtime does not import the simulator.
ScenarioParser = Callable[[Any, Path, str], Scenario]


@dataclass(frozen=True)
class KubeConfig:
    queues: tuple[Queue, ...]  # empty: read the cluster's Volcano Queues
    policy: PolicyConfig
    settings: KubeSettings


def _read(path: Path) -> dict[str, Any]:
    try:
        data = read_yaml(path)
    except ConfigError as error:
        raise KubeConfigError(str(error)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KubeConfigError(f"{path}: the file must be a mapping")
    return data


def _settings(data: dict[str, Any]) -> KubeSettings:
    try:
        model = KubeSettingsModel.model_validate(data.get("kubernetes") or {})
    except ValidationError as error:
        raise KubeConfigError(f"kubernetes.{one_line(error)}") from None
    return settings_from_model(model)


def parse_kube_config(data: dict[str, Any]) -> KubeConfig:
    """A decoded configuration file (DESIGN §8) with an optional `kubernetes:` section."""
    settings = _settings(data)
    rest = {key: value for key, value in data.items() if key != "kubernetes"}
    if rest.get("queues"):
        try:
            model = ConfigFileModel.model_validate(rest)
        except ValidationError as error:
            raise KubeConfigError(one_line(error)) from None
        try:
            deployment = parse_deployment(model)
        except ConfigError as error:
            raise KubeConfigError(str(error)) from None
        known = {queue.name for queue in deployment.queues}
        for namespace, binding in settings.namespaces.items():
            for queue in binding.queues:
                if queue not in known:
                    raise KubeConfigError(
                        f"kubernetes.namespaces.{namespace}.queues: unknown queue {queue!r}"
                    )
        return KubeConfig(deployment.queues, deployment.policy, settings)
    unknown = set(rest) - set(ConfigFileModel.model_fields)
    if unknown:
        raise KubeConfigError(f"{sorted(unknown)[0]}: unknown key")
    try:
        policy = policy_config(PolicyModel.model_validate(rest.get("policy") or {}))
    except (ValidationError, LookupError, ValueError) as error:
        raise KubeConfigError(f"policy: {str(error).splitlines()[0]}") from None
    return KubeConfig((), replace(policy, week_offset=UNIX_WEEK_OFFSET), settings)


def load_kube_config(path: Path | None) -> KubeConfig:
    """The controller's configuration; defaults (queues from the cluster) without a file."""
    if path is None:
        return parse_kube_config({})
    try:
        return parse_kube_config(_read(path))
    except KubeConfigError as error:
        if str(error).startswith(f"{path}:"):
            raise
        raise KubeConfigError(f"{path}: {error}") from None


def load_render_input(
    path: Path, parse_scenario: ScenarioParser
) -> tuple[KubeConfig, Scenario | None]:
    """A configuration file, or a scenario (then also returned, for its cluster and jobs)."""
    data = _read(path)
    if not _SCENARIO_KEYS & set(data):
        return load_kube_config(path), None
    try:
        settings = _settings(data)
    except KubeConfigError as error:
        raise KubeConfigError(f"{path}: {error}") from None
    rest = {key: value for key, value in data.items() if key != "kubernetes"}
    try:
        scenario = parse_scenario(rest, path.parent, path.stem)
    except ScenarioError as error:
        raise KubeConfigError(f"{path}: {error}") from None
    return KubeConfig(scenario.queues, scenario.config, settings), scenario
