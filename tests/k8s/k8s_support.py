"""A fake cluster with a controller on it, and readers for what the tests assert on.

    world = World().hypernode("a", "n", count=4).start()
    world.submit("small0", gpus=8)
    world.step()                      # observe + cycle, then the fake binds pods
    assert world.state("small0") == "Running"
    assert world.pinned("small0") == ["n-0"]

Records live in namespace `team` unless said otherwise; the queue config is the service's
format (`caldera.k8s.config.parse_kube_config`), as `caldera k8s run --config` reads it. The
clock is the fake cluster's: `step(seconds)` advances it first. `restart()` throws the
controller away and starts a new one on the same cluster (a crash, a fail-over).
"""

from __future__ import annotations

import json
from typing import Any

from caldera.k8s import FakeCluster, KubeRuntime, KubeSettings, names
from caldera.k8s.config import parse_kube_config

__all__ = ["NAMESPACE", "World", "request"]

NAMESPACE = "team"


def request(**fields: Any) -> dict[str, Any]:
    """A job record's request: a normal 8-GPU single task in queue `team` by default."""
    base: dict[str, Any] = {"queue": "team", "type": "normal", "gpus": 8}
    base.update(fields)
    return base


class World:
    def __init__(
        self,
        queues: list[dict[str, Any]] | None = None,
        policy: dict[str, Any] | None = None,
        settings: KubeSettings | None = None,
    ) -> None:
        config = parse_kube_config(
            {
                "queues": queues or [{"name": "team"}],
                "policy": {"grace_period": 120, "eviction_budget": 1.0, **(policy or {})},
            }
        )
        self.config = config
        self.settings = settings or KubeSettings(image="registry.example.com/train:v1")
        self.cluster = FakeCluster()
        self.runtime: KubeRuntime | None = None

    # -- building ----------------------------------------------------------------------------

    def hypernode(
        self, hypernode: str, prefix: str, count: int, gpus: int = 8, spine: str = "s0"
    ) -> World:
        for i in range(count):
            self.cluster.add_node(
                f"{prefix}-{i}",
                gpus=gpus,
                labels={"caldera.io/hypernode": hypernode, "caldera.io/spine": spine},
            )
        return self

    def start(self) -> World:
        self.runtime = KubeRuntime(
            self.cluster,
            self.config.queues,
            self.config.policy,
            self.settings,
            clock=self.cluster.clock,
        )
        self.rt.step()
        return self

    def restart(self) -> KubeRuntime:
        old = self.runtime
        self.start()
        assert self.runtime is not old
        return self.rt

    @property
    def rt(self) -> KubeRuntime:
        assert self.runtime is not None, "call start() first"
        return self.runtime

    # -- acting ------------------------------------------------------------------------------

    def submit(self, name: str, namespace: str = NAMESPACE, **fields: Any) -> str:
        self.cluster.submit(namespace, name, request(**fields))
        return names.job_id(namespace, name)

    def step(self, seconds: float = 0.0) -> None:
        if seconds:
            self.cluster.advance(seconds)
        self.rt.step()
        self.cluster.settle()

    def run_until(self, name: str, state: str, limit: float = 3600.0, dt: float = 10.0) -> float:
        """Step `dt` seconds at a time until the job's record shows `state`."""
        waited = 0.0
        while self.state(name) != state:
            assert waited < limit, f"{name} never reached {state}: {self.state(name)}"
            self.step(dt)
            waited += dt
        return waited

    # -- reading -----------------------------------------------------------------------------

    def record(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return self.cluster.record(namespace, name)

    def status(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        text = self.record(name, namespace)["metadata"].get("annotations", {}).get(names.STATUS)
        assert text is not None, f"{name} was never admitted"
        data: dict[str, Any] = json.loads(text)
        return data

    def state(self, name: str, namespace: str = NAMESPACE) -> str:
        return str(self.status(name, namespace)["state"])

    def nomination(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        text = self.record(name, namespace)["metadata"].get("annotations", {}).get(names.NOMINATION)
        return json.loads(text) if text else None

    def throttles(self) -> dict[str, Any]:
        state = self.cluster.config_maps[(self.settings.state_namespace, names.STATE_CONFIG_MAP)]
        data: dict[str, Any] = json.loads(state["data"]["throttles"])
        return data

    def pods(self, name: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        return [
            pod
            for (ns, _), pod in sorted(self.cluster.pods.items())
            if ns == namespace and pod["metadata"]["labels"].get(names.JOB) == name
        ]

    def pinned(self, name: str, namespace: str = NAMESPACE) -> list[str]:
        """The node each pod of the job is pinned to by its required node affinity."""
        return [
            pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
            for pod in self.pods(name, namespace)
        ]

    def deleted(self) -> list[str]:
        """Pod names the controller deleted, in order."""
        return [pod for _, pod, _ in self.cluster.deletions]
