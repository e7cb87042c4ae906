"""caldera's controller as a replay runs it: its own process (`caldera k8s run`), configured
from the scenario as docs/kubernetes.md says, and stopped as an operator would stop it.

Apart from the replay's run because it changes with the controller's configuration schema
(caldera.config.schema) and command line, not with how a replay measures.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from caldera.config import Scenario
from caldera.model import GPU_MILLI, Queue
from caldera.replay.api import NAMESPACE, list_volcano_queues
from caldera.replay.manifests import IMAGE

__all__ = ["controller_config", "start_controller", "stop_controller"]


def controller_config(scenario: Scenario, scheduler: str) -> dict[str, Any]:
    """The configuration file of the controller for `scenario`, its pods bound by
    `scheduler` (the pods' schedulerName)."""
    config = scenario.config
    policy = {
        "name": config.name,
        "grace_period": config.grace_period,
        "throttle_timeout": config.throttle_timeout,
        "cooldown": config.cooldown,
        "eviction_budget": config.eviction_budget,
        "alpha": config.alpha,
        "beta": config.beta,
        "emergency_checkpoint": config.emergency_checkpoint,
        "throttle": config.throttle,
        "nomination_timeout": config.nomination_timeout,
        "preempt_backoff": config.preempt_backoff,
        "lossy_patience": config.lossy_patience,
        "ceiling": config.ceiling,
        "slo": dict(config.slo),
    }
    return {
        "queues": [_queue_model(q) for q in scenario.queues],
        "policy": policy,
        "kubernetes": {
            "namespaces": {
                NAMESPACE: {"queues": [q.name for q in scenario.queues], "critical": True}
            },
            "state_namespace": NAMESPACE,
            "scheduler_name": scheduler,
            "image": IMAGE,
            "resync": 1,
            "bind_timeout": 60,
            "leader_election": {"enabled": False},  # one controller per replay
        },
    }


def start_controller(
    scenario: Scenario, scheduler: str, kubeconfig: Path, folder: Path, custom: Any
) -> subprocess.Popen[bytes]:
    """Start the controller (its configuration and log in `folder`) and wait until it has
    created the scenario's queues, as it does on start."""
    config = folder / "caldera.yaml"
    config.write_text(yaml.safe_dump(controller_config(scenario, scheduler), sort_keys=False))
    log = (folder / "controller.log").open("wb")
    command = [
        sys.executable, "-c", "from caldera.cli.main import main; main()",
        "k8s", "run", "--kubeconfig", str(kubeconfig), "--config", str(config),
    ]  # fmt: skip
    try:
        controller = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"},
        )
    finally:
        log.close()
    # it creates the PriorityClasses and Queues on start
    deadline = time.monotonic() + 60
    wanted = {q.name for q in scenario.queues}
    while True:
        if controller.poll() is not None:
            tail = (folder / "controller.log").read_text(errors="replace")[-500:]
            raise RuntimeError(f"replay: caldera's controller exited: {tail}")
        if wanted <= {q["metadata"]["name"] for q in list_volcano_queues(custom)}:
            return controller
        if time.monotonic() > deadline:
            raise RuntimeError("replay: caldera's controller never created the queues")
        time.sleep(0.2)


def stop_controller(controller: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, as on a rollout; killed if it has not stopped within 20 seconds."""
    if controller is None or controller.poll() is not None:
        return
    controller.send_signal(signal.SIGTERM)
    try:
        controller.wait(timeout=20)
    except subprocess.TimeoutExpired:
        controller.kill()
        controller.wait()


def _quota(resources: Any, gpu_always: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resources.gpu or gpu_always:
        out["gpu"] = resources.gpu / GPU_MILLI
    if resources.cpu:
        out["cpu"] = f"{resources.cpu}m"
    if resources.memory:
        out["memory"] = f"{resources.memory}Mi"
    return out


def _queue_model(queue: Queue) -> dict[str, Any]:
    """A queue as the configuration file writes it (caldera.config.schema.QueueModel)."""
    out: dict[str, Any] = {
        "name": queue.name,
        "weight": queue.weight,
        "reclaimable": queue.reclaimable,
        "critical_allowed": queue.critical_allowed,
        "state": queue.state.value,
    }
    if queue.deserved is not None:
        out["deserved"] = _quota(queue.deserved, gpu_always=True)
    if queue.guarantee is not None:
        out["guarantee"] = _quota(queue.guarantee)
    if queue.capability is not None:
        out["capability"] = _quota(queue.capability)
    return out
