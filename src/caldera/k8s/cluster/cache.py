"""What the controller reads of the cluster, and how: `Listing` (list everything each step)
or `InformerCache` (list once, then watch).

The runtime is level-triggered: each step looks at what is there (nodes, the TrainingJobs
and caldera's pods of each served namespace, every pod still running anywhere) through
`ClusterReads`. `Listing` asks the API server for all of it every step — simple, and what the
in-memory tests and `--once`/`--dry-run` use. `InformerCache` is what a running controller
uses (issue 10, deliverable 2), in the manner of client-go's informers:

- each kind is **listed once**, then **watched from that list's resourceVersion** with
  bookmarks (the server sends the current version while nothing changes, so a re-opened
  watch never falls far behind); a watch that times out re-opens from where it was, it does
  not list again;
- a watch answered **410 Gone** (the version was compacted away) lists again — the only
  re-list in steady state;
- objects are kept **slim** (what the controller reads: a pod's placement, phase, exit code,
  requests and owner, not its whole spec; a TrainingJob without its `managedFields` and
  kubectl's last-applied copy), so 10,000 pods and jobs stay within memory targets;
- every change sets one `wake` event: the controller's loop runs one step per burst of
  events (`caldera.k8s.controller`: `min_gap`), never one per event; a change to nothing the
  controller reads (a node's heartbeat: only its conditions' timestamps move) wakes nobody.

Why not kopf: kopf is built around per-object handlers (on create/update/delete, with its own
progress annotations or status fields, finalizers and retries per object), while caldera's
controller is a batch scheduler that decides on a snapshot of the whole cluster each cycle;
kopf's in-memory indexes would serve as this cache, but its peering (its own CRDs, not a
coordination.k8s.io Lease) and its per-object persistence would fight the design, so the
official client's list/watch is used directly, as client-go informers do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from caldera.k8s.cluster.api import ClusterAPI, ClusterError, Object
from caldera.k8s.settings import KubeSettings
from caldera.trainingjob_api import MANAGED, PLURAL

__all__ = [
    "ClusterReads",
    "Informer",
    "InformerCache",
    "Listing",
    "Watchable",
    "slim_job",
    "slim_node",
    "slim_pod",
]

log = logging.getLogger("caldera.k8s")

NOT_ENDED = "status.phase!=Succeeded,status.phase!=Failed"


class ClusterReads(Protocol):
    """The cluster as the runtime reads it each step."""

    def nodes(self) -> list[Object]: ...

    def jobs(self, namespace: str) -> list[Object]: ...

    def pods(self, namespace: str) -> list[Object]:
        """caldera's pods in one served namespace (ended ones included)."""
        ...

    def running(self) -> list[Object]:
        """Every pod not yet ended, anywhere (for the room caldera does not own)."""
        ...


@dataclass
class Listing:
    """List everything, every step."""

    api: ClusterAPI
    settings: KubeSettings

    def nodes(self) -> list[Object]:
        return self.api.list_nodes(self.settings.node_selector)

    def jobs(self, namespace: str) -> list[Object]:
        return self.api.list_jobs(namespace)

    def pods(self, namespace: str) -> list[Object]:
        return self.api.list_pods(namespace, f"{MANAGED}=true")

    def running(self) -> list[Object]:
        return self.api.list_pods("", "", NOT_ENDED)


class Watchable(Protocol):
    """What an informer needs from the API (`KubeClusterAPI` has it)."""

    def list_objects(
        self, kind: str, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[Object], str]: ...

    def watch_objects(
        self,
        kind: str,
        namespace: str,
        label_selector: str,
        field_selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> Any: ...


def _keep(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: source[k] for k in keys if k in source}


def slim_pod(pod: Object) -> Object:
    """A pod with what the controller reads of it (about a tenth of the object)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = [
        {"name": c.get("name"), "resources": c.get("resources") or {}}
        for c in spec.get("containers") or []
    ]
    init = [
        {"name": c.get("name"), "resources": c.get("resources") or {}}
        for c in spec.get("initContainers") or []
    ]
    statuses = [
        {"name": c.get("name"), "state": c.get("state") or {}}
        for c in status.get("containerStatuses") or []
    ]
    return {
        "metadata": _keep(
            metadata,
            (
                "name",
                "namespace",
                "uid",
                "labels",
                "annotations",
                "ownerReferences",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
            ),
        ),
        "spec": {
            **_keep(spec, ("nodeName", "terminationGracePeriodSeconds", "priority")),
            "containers": containers,
            "initContainers": init,
        },
        "status": {**_keep(status, ("phase", "conditions")), "containerStatuses": statuses},
    }


def slim_node(node: Object) -> Object:
    """A node with what `caldera.k8s.reading.nodes` reads: name, labels, cordon, taints,
    allocatable, conditions without their timestamps — so a heartbeat, which changes only
    those, leaves it as it was (and wakes nobody: a thousand nodes beat every few seconds)."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    conditions = [
        _keep(c, ("type", "status", "reason", "message")) for c in status.get("conditions") or []
    ]
    return {
        "metadata": _keep(metadata, ("name", "labels")),
        "spec": _keep(spec, ("unschedulable", "taints")),
        "status": {**_keep(status, ("allocatable",)), "conditions": conditions},
    }


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def slim_job(job: Object) -> Object:
    """A TrainingJob without what only its writers read: `managedFields` and kubectl's copy
    of the last applied manifest (together often larger than the spec and status)."""
    metadata = dict(job.get("metadata") or {})
    metadata.pop("managedFields", None)
    annotations = metadata.get("annotations")
    if annotations and _LAST_APPLIED in annotations:
        metadata["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    return {**job, "metadata": metadata}


@dataclass
class Informer:
    """One kind in one scope, kept current by list + watch."""

    api: Watchable
    kind: str
    namespace: str = ""
    label_selector: str = ""
    field_selector: str = ""
    wake: threading.Event = field(default_factory=threading.Event)
    slim: Callable[[Object], Object] | None = None
    timeout: int = 300  # seconds a watch stays open before it is re-opened (no re-list)
    synced: threading.Event = field(default_factory=threading.Event)
    lists: int = 0  # full lists made (the first, and one per 410 Gone)
    watches: int = 0  # watches opened
    events: int = 0  # changes seen
    heard_at: float = 0.0  # wall time of the last list, change, bookmark or watch that ended well
    _store: dict[tuple[str, str], Object] = field(default_factory=dict)
    _version: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def items(self) -> list[Object]:
        with self._lock:
            return list(self._store.values())

    def _key(self, obj: Object) -> tuple[str, str]:
        metadata = obj.get("metadata") or {}
        return str(metadata.get("namespace", "")), str(metadata.get("name", ""))

    def relist(self) -> None:
        items, version = self.api.list_objects(
            self.kind, self.namespace, self.label_selector, self.field_selector
        )
        store = {self._key(o): (self.slim(o) if self.slim else o) for o in items}
        with self._lock:
            self._store = store
        self._version = version
        self.lists += 1
        self.heard_at = time.time()
        self.synced.set()
        self.wake.set()

    def watch_once(self) -> None:
        """One watch, from the last version, until it times out or fails."""
        from caldera.k8s.cluster.client import Expired

        if self._version is None:
            self.relist()
        assert self._version is not None
        self.watches += 1
        try:
            for kind, obj in self.api.watch_objects(
                self.kind,
                self.namespace,
                self.label_selector,
                self.field_selector,
                self._version,
                self.timeout,
            ):
                self.heard_at = time.time()
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    key = self._key(obj)
                    kept = self.slim(obj) if self.slim else obj
                    with self._lock:
                        if kind == "DELETED":
                            changed = self._store.pop(key, None) is not None
                        else:
                            changed = self._store.get(key) != kept
                            self._store[key] = kept
                    if changed:  # not what the controller reads: no step for it
                        self.events += 1
                        self.wake.set()
                if version:
                    self._version = str(version)
            self.heard_at = time.time()  # the watch ran its time out: the server was there
        except Expired:
            log.info("%s %s: watch expired (410 Gone): listing again", self.kind, self.namespace)
            self._version = None

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                self.watch_once()
                backoff = 1.0
            except ClusterError as error:
                log.warning(
                    "%s %s: %s (retrying in %.0f s)", self.kind, self.namespace, error, backoff
                )
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception:  # an object it cannot take: the informer lives on (issue 34)
                log.exception("%s %s: watch failed", self.kind, self.namespace)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)


@dataclass
class InformerCache:
    """`ClusterReads` from informers: one for nodes, one for every running pod, and per served
    namespace one for TrainingJobs and one for caldera's pods."""

    api: Watchable
    settings: KubeSettings
    wake: threading.Event = field(default_factory=threading.Event)
    timeout: int = 300
    informers: dict[str, Informer] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    _deadline: float = 0.0  # monotonic time the informers' first lists are waited for until

    def __post_init__(self) -> None:
        def add(key: str, kind: str, namespace: str = "", label: str = "", fields: str = "",
                slim: Callable[[Object], Object] | None = None) -> None:  # fmt: skip
            self.informers[key] = Informer(
                self.api, kind, namespace, label, fields, self.wake, slim, self.timeout
            )

        add("nodes", "nodes", label=self.settings.node_selector, slim=slim_node)
        add("running", "pods", fields=NOT_ENDED, slim=slim_pod)
        for namespace in self.settings.namespaces:
            add(f"jobs/{namespace}", PLURAL, namespace, slim=slim_job)
            add(f"pods/{namespace}", "pods", namespace, f"{MANAGED}=true", slim=slim_pod)

    def start(self, stop: threading.Event, timeout: float = 60.0) -> list[threading.Thread]:
        """Start the informers (once: a standby starts them before it leads); return once
        each has listed, or `timeout` passed since the first call: one wait in all, however
        many informers cannot list and however often it is called (issue 34: one namespace
        that could not be listed held every namespace back a minute per informer and call;
        until it lists, `ready` keeps its pods from being taken for orphans)."""
        if self.threads:
            self._wait_synced()
            return self.threads
        threads = [
            threading.Thread(
                target=informer.run, args=(stop,), name=f"caldera-informer-{key}", daemon=True
            )
            for key, informer in self.informers.items()
        ]
        for thread in threads:
            thread.start()
        self.threads = threads
        self._deadline = time.monotonic() + timeout
        self._wait_synced()
        return threads

    def _wait_synced(self) -> None:
        for informer in self.informers.values():
            informer.synced.wait(max(self._deadline - time.monotonic(), 0.0))

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    @property
    def lists(self) -> int:
        return sum(i.lists for i in self.informers.values())

    def ready(self, namespace: str) -> bool:
        """Whether the namespace's TrainingJobs and caldera's pods there have been listed:
        until then a pod no job claims is no orphan (its job may just be unread; issue 34:
        a namespace whose informer could not list had its running pods deleted)."""
        return all(
            self.informers[key].synced.is_set()
            for key in (f"jobs/{namespace}", f"pods/{namespace}")
        )

    def nodes(self) -> list[Object]:
        return self.informers["nodes"].items()

    def jobs(self, namespace: str) -> list[Object]:
        return self.informers[f"jobs/{namespace}"].items()

    def pods(self, namespace: str) -> list[Object]:
        return self.informers[f"pods/{namespace}"].items()

    def running(self) -> list[Object]:
        return self.informers["running"].items()
