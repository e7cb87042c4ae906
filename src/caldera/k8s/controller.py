"""The controller loop behind `caldera k8s run`: when to call `KubeRuntime.step`.

The runtime is level-triggered (each step reads what is there), so the loop only decides
*when*: at once after a change (pods, TrainingJobs, nodes), at the cycle's wake-up time
(grace-period ends, throttle timeouts, window edges), and every `resync` seconds anyway.
With an informer cache (`caldera.k8s.cluster.cache.InformerCache`, what `caldera k8s run` uses) the
informers' watches wake it; with plain listing, wake-up watches do. Bursts of changes share
one step (`min_gap`). A failing API server is logged in one line and retried with back-off;
the loop never dies of it.

`DryRunCluster` wraps a cluster: it reads for real and writes nothing, recording one line per
write it would have made. `caldera k8s run --dry-run` is one step through it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from caldera.errors import NotFound
from caldera.k8s.cluster.api import ClusterAPI, ClusterError, Object
from caldera.k8s.cluster.cache import InformerCache
from caldera.k8s.effects.render import priority_classes, volcano_queue
from caldera.k8s.runtime import KubeRuntime
from caldera.k8s.settings import KubeSettings
from caldera.model import Queue
from caldera.trainingjob_api import KIND, MANAGED, PLURAL

__all__ = ["Controller", "DryRunCluster", "sync_cluster_objects"]

log = logging.getLogger("caldera.k8s")

# Seconds between two `stats:` log lines (what `caldera bench k8s` reads: requests per cycle).
STATS_EVERY = 10.0


def sync_cluster_objects(api: ClusterAPI, queues: Iterable[Queue], settings: KubeSettings) -> None:
    """Create the four PriorityClasses and make the Volcano Queues match caldera's queues
    (departments before their teams: Volcano admits a child only under an existing parent)."""
    for body in priority_classes():
        api.apply_priority_class(body)
    for queue in sorted(queues, key=lambda q: q.parent is not None):
        api.apply_queue(volcano_queue(queue, settings))


class DryRunCluster:
    """Reads pass through; writes are recorded in `planned` and not sent."""

    def __init__(self, api: ClusterAPI) -> None:
        self.api = api
        self.planned: list[str] = []

    def _plan(self, line: str, body: Object | None = None) -> Object:
        self.planned.append(line)
        made = copy.deepcopy(body or {})
        made.setdefault("metadata", {}).setdefault("uid", "dry-run")
        return made

    def check(self, namespaces: Sequence[str]) -> None:
        self.api.check(namespaces)

    def list_nodes(self, label_selector: str = "") -> list[Object]:
        return self.api.list_nodes(label_selector)

    def list_pods(
        self, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        return self.api.list_pods(namespace, label_selector, field_selector)

    def read_pod(self, namespace: str, name: str) -> Object | None:
        return self.api.read_pod(namespace, name)

    def list_jobs(self, namespace: str) -> list[Object]:
        return self.api.list_jobs(namespace)

    def read_config_map(self, namespace: str, name: str) -> Object | None:
        return self.api.read_config_map(namespace, name)

    def read_admission_policy(self, name: str) -> tuple[Object | None, Object | None]:
        return self.api.read_admission_policy(name)

    def list_queues(self) -> list[Object]:
        return self.api.list_queues()

    def read_queue(self, name: str) -> Object | None:
        return self.api.read_queue(name)

    def watch(
        self, kind: str, namespace: str, label_selector: str, timeout_seconds: int
    ) -> Iterator[str]:
        return self.api.watch(kind, namespace, label_selector, timeout_seconds)

    def create_pod(self, namespace: str, body: Object) -> Object:
        node = body["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        return self._plan(f"create pod {namespace}/{body['metadata']['name']} on {node}", body)

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        self._plan(f"delete pod {namespace}/{name} (grace {grace_seconds} s)")
        return True

    def create_service(self, namespace: str, body: Object) -> Object:
        return self._plan(f"create service {namespace}/{body['metadata']['name']}", body)

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        self._plan(f"evict pod {namespace}/{name} (grace {grace_seconds} s)")
        return True

    def delete_service(self, namespace: str, name: str) -> bool:
        self._plan(f"delete service {namespace}/{name}")
        return True

    def create_pod_group(self, namespace: str, body: Object) -> Object:
        return self._plan(f"create podgroup {namespace}/{body['metadata']['name']}", body)

    def delete_pod_group(self, namespace: str, name: str) -> bool:
        self._plan(f"delete podgroup {namespace}/{name}")
        return True

    def create_config_map(self, namespace: str, body: Object) -> Object:
        return self._plan(f"create configmap {namespace}/{body['metadata']['name']}", body)

    def patch_config_map(self, namespace: str, name: str, patch: Object) -> Object:
        return self._plan(f"update configmap {namespace}/{name}", patch)

    def patch_job_status(self, namespace: str, name: str, status: Object) -> Object:
        state = status.get("state")
        suffix = f" (state {state})" if state else ""
        return self._plan(f"update {KIND} {namespace}/{name} status{suffix}", status)

    def create_event(self, namespace: str, body: Object) -> None:
        self._plan(f"event {body['reason']} on {namespace}/{body['involvedObject']['name']}")

    def apply_queue(self, body: Object) -> None:
        self._plan(f"apply queue {body['metadata']['name']}")

    def apply_priority_class(self, body: Object) -> None:
        self._plan(f"apply priorityclass {body['metadata']['name']} ({body['value']})")


class Controller:
    """Drives one runtime until `stop` is set."""

    def __init__(
        self,
        runtime: KubeRuntime,
        resync: float = 30.0,
        min_gap: float = 0.2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runtime = runtime
        self.api = runtime.api
        self.settings = runtime.settings
        self.resync = resync
        self.min_gap = min_gap
        self.clock = clock
        self.wake = threading.Event()
        self.steps = 0
        self.stats_every = STATS_EVERY

    def stats(self) -> dict[str, int]:
        """What the loop has cost so far: steps, cycles, API requests sent (retries and
        watch re-opens included), full lists and watches opened by the informers."""
        reads = self.runtime.reads
        informers = reads.informers.values() if isinstance(reads, InformerCache) else ()
        return {
            "steps": self.steps,
            "cycles": self.runtime.stats.cycles,
            "requests": int(getattr(self.api, "requests", 0)),
            "retries": int(getattr(self.api, "retries", 0)),
            "lists": sum(i.lists for i in informers),
            "watches": sum(i.watches for i in informers),
        }

    def _report(self, stop: threading.Event) -> None:
        """A `stats:` line every `stats_every` seconds, from its own thread: a step that
        writes ten thousand starts runs for minutes, and the counters move meanwhile."""
        while not stop.wait(self.stats_every):
            log.info("stats: %s", " ".join(f"{k}={v}" for k, v in self.stats().items()))

    def _watch(self, kind: str, namespace: str, selector: str, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            began = self.clock()
            try:
                for _ in self.api.watch(kind, namespace, selector, max(int(self.resync), 1)):
                    self.wake.set()
                    if stop.is_set():
                        return
                backoff = 1.0
                if self.clock() - began < 1.0:
                    stop.wait(1.0)  # a watch that ends at once must not spin
            except ClusterError as error:
                log.warning("watch %s: %s (retrying in %.0f s)", kind, error, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)
            except Exception:  # a watch is only a wake-up: never let it take the loop down
                log.exception("watch %s failed", kind)
                stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)

    def start_watches(self, stop: threading.Event) -> list[threading.Thread]:
        watches: list[tuple[str, str, str]] = [("nodes", "", self.settings.node_selector)]
        for namespace in self.settings.namespaces:
            watches.append(("pods", namespace, f"{MANAGED}=true"))
            watches.append((PLURAL, namespace, ""))
        threads = [
            threading.Thread(
                target=self._watch,
                args=(*w, stop),
                name=f"caldera-watch-{w[0]}-{w[1] or 'all'}",
                daemon=True,
            )
            for w in watches
        ]
        for thread in threads:
            thread.start()
        return threads

    def run(
        self,
        stop: threading.Event,
        watches: bool = True,
        leading: Callable[[], bool] | None = None,
    ) -> None:
        """Step until `stop`. `leading` (leader election): steps only while it says so — a
        replica that could not renew its Lease in time acts no more."""
        if leading is not None:  # a flush admits newcomers only while this replica leads
            self.runtime.actuator.leading = leading
        reads = self.runtime.reads
        if isinstance(reads, InformerCache):
            # The informers are the watches: their changes wake the loop.
            reads.wake = self.wake
            for informer in reads.informers.values():
                informer.wake = self.wake
            reads.start(stop)
        elif watches:
            self.start_watches(stop)
        threading.Thread(
            target=self._report, args=(stop,), name="caldera-stats", daemon=True
        ).start()
        backoff = 1.0
        while not stop.is_set():
            began = self.clock()
            if leading is not None and not leading():
                stop.wait(0.25)
                continue
            try:
                self.runtime.step()
                self.steps += 1
                backoff = 1.0
            except (ClusterError, NotFound) as error:
                log.error("%s (retrying in %.0f s)", error, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            except Exception:  # a bug met in one step: logged, the loop lives on (issue 34)
                log.exception("step failed (retrying in %.0f s)", backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            timeout = self.resync
            wakeup = self.runtime.next_wakeup
            if wakeup is not None:
                timeout = min(timeout, max(wakeup - self.clock(), 0.0))
            deadline = self.clock() + timeout
            while not stop.is_set() and not self.wake.wait(
                min(0.25, max(deadline - self.clock(), 0))
            ):
                if self.clock() >= deadline:
                    break  # slices: a stop request is seen within a quarter second
            self.wake.clear()
            # Events come in bursts (a gang's pods): let them land, then look once.
            rest = self.min_gap - (self.clock() - began)
            if rest > 0:
                stop.wait(rest)
