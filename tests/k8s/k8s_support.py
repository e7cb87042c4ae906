"""A fake cluster with a controller on it, and readers for what the tests assert on.

    world = World().hypernode("a", "n", count=4).start()
    world.submit("small0", gpus=8)
    world.step()                      # observe + cycle, then the fake binds pods
    assert world.state("small0") == "Running"
    assert world.pinned("small0") == ["n-0"]

TrainingJobs live in namespace `team` unless said otherwise (`serving` may submit critical,
`other` is served too); the queue config is the service's format
(`caldera.k8s.config.parse_kube_config`), as `caldera k8s run --config` reads it. The clock is
the fake cluster's: `step(seconds)` advances it first. `restart()` throws the controller away
and starts a new one on the same cluster (a crash, a fail-over).

`training_job(...)` writes a TrainingJob spec from the short keywords tests use
(`tasks=2, gpus=8, type="large-job", topology={...}`).
"""

from __future__ import annotations

import copy
import json
import threading
from types import MappingProxyType
from typing import Any

from caldera.k8s import FakeCluster, KubeRuntime, KubeSettings, NamespaceBinding, names
from caldera.k8s.config import parse_kube_config
from caldera.k8s.reporting.status import submit_time
from caldera.trainingjob_api import JOB, PLACEMENT

__all__ = ["NAMESPACE", "SETTINGS", "Serialized", "World", "training_job"]

NAMESPACE = "team"
SETTINGS = KubeSettings(
    image="registry.example.com/train:v1",
    namespaces=MappingProxyType(
        {
            "team": NamespaceBinding(("team",)),
            "serving": NamespaceBinding(("team",), critical=True),
            "other": NamespaceBinding(("team",)),
        }
    ),
)


def training_job(
    *,
    tasks: int = 1,
    gpus: float = 8,
    type: str = "normal",
    queue: str | None = None,
    min_available: int | None = None,
    cpu: str | float | None = None,
    memory: str | None = None,
    template: dict[str, Any] | None = None,
    protected: bool = False,
    **rest: Any,
) -> dict[str, Any]:
    """A TrainingJob spec: one task group of `tasks` replicas, `gpus` each (as the field
    `gpus`, which also takes fractions). `rest`: other spec keys as they are (checkpoint,
    topology with highest_tier spelled highestTier, maxRetries, expectedDuration)."""
    template = copy.deepcopy(template or {})
    pod_spec = template.setdefault("spec", {})
    containers = pod_spec.setdefault("containers", [{"name": "main"}])
    requests: dict[str, Any] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if requests:
        containers[0].setdefault("resources", {})["requests"] = requests
    spec: dict[str, Any] = {
        "type": type,
        "tasks": [{"name": "worker", "replicas": tasks, "gpus": gpus, "template": template}],
    }
    if queue is not None:
        spec["queue"] = queue
    if min_available is not None:
        spec["minAvailable"] = min_available
    if protected:
        spec["protected"] = True
    for key, value in rest.items():
        if key == "topology":
            value = {
                "mode": value.get("mode", "soft"),
                "highestTier": value.get("highest_tier", 1),
            }
        elif key == "checkpoint":
            value = {
                {"on_sigterm": "onSigterm"}.get(k, k): v for k, v in value.items() if v is not None
            }
        spec[
            {"max_retries": "maxRetries", "expected_duration": "expectedDuration"}.get(key, key)
        ] = value
    return spec


class Serialized:
    """The fake for several threads: one call at a time."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.cluster, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                return found(*args, **kwargs)

        return call


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
        self.settings = settings or SETTINGS
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

    def start(self, writers: int = 1) -> World:
        """The runtime on the fake; `writers` > 1 sends its writes at once, as `caldera k8s
        run` does (through a lock: the fake is not thread-safe, the order still varies)."""
        self.runtime = KubeRuntime(
            Serialized(self.cluster) if writers > 1 else self.cluster,
            self.config.queues,
            self.config.policy,
            self.settings,
            clock=self.cluster.clock,
            writers=writers,
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
        self.cluster.submit(namespace, name, training_job(**fields))
        return names.job_id(namespace, name)

    def one_waits_for_another(self) -> World:
        """On one 8-GPU node: `first` runs; `second` is admitted and waits, its Pending status
        written (a start after that is a waiting job's: its status follows its pods)."""
        self.hypernode("a", "n", count=1).start()
        self.submit("first", gpus=8)
        self.step()
        self.submit("second", gpus=8)
        self.step()
        assert self.state("second") == "Pending"
        return self

    def step(self, seconds: float = 0.0) -> None:
        if seconds:
            self.cluster.advance(seconds)
        self.rt.step()
        self.cluster.settle()

    def run_until(self, name: str, state: str, limit: float = 3600.0, dt: float = 10.0) -> float:
        """Step `dt` seconds at a time until the job's status shows `state`."""
        waited = 0.0
        while self.state(name) != state:
            assert waited < limit, f"{name} never reached {state}: {self.state(name)}"
            self.step(dt)
            waited += dt
        return waited

    # -- reading -----------------------------------------------------------------------------

    def job(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return self.cluster.job(namespace, name)

    def status(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        status: dict[str, Any] = self.job(name, namespace).get("status") or {}
        assert status.get("state"), f"{name} was never admitted"
        return status

    def state(self, name: str, namespace: str = NAMESPACE) -> str:
        return str(self.status(name, namespace)["state"])

    def condition(self, name: str, kind: str, namespace: str = NAMESPACE) -> tuple[str, str]:
        """(status, reason) of one of the job's conditions."""
        for condition in self.status(name, namespace).get("conditions") or []:
            if condition["type"] == kind:
                return condition["status"], condition["reason"]
        raise AssertionError(f"{name} has no condition {kind}")

    def events(self, name: str, namespace: str = NAMESPACE) -> list[str]:
        """The reasons of the Events about a job, oldest first."""
        return [reason for reason, _ in self.cluster.events_of(namespace, name)]

    def submitted_at(self, name: str, namespace: str = NAMESPACE) -> float:
        return float(submit_time(self.status(name, namespace)) or 0.0)

    def nomination(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        controller = self.status(name, namespace).get("controller") or {}
        found: dict[str, Any] | None = controller.get("nomination")
        return found

    def placements(self, name: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        """The decided placement on each pod of the job (rank order)."""
        return [
            json.loads(pod["metadata"]["annotations"][PLACEMENT])
            for pod in self.pods(name, namespace)
        ]

    def throttles(self) -> dict[str, Any]:
        state = self.cluster.config_maps[(self.settings.state_namespace, names.STATE_CONFIG_MAP)]
        data: dict[str, Any] = json.loads(state["data"]["throttles"])
        return data

    def pods(self, name: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        return [
            pod
            for (ns, _), pod in sorted(self.cluster.pods.items())
            if ns == namespace and pod["metadata"]["labels"].get(JOB) == name
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
