"""`KubeClusterAPI`: the `ClusterAPI` seam on the official `kubernetes` Python client.

CoreV1Api for nodes, pods (and their evictions), Services, Events and the state ConfigMap;
CustomObjectsApi for caldera's TrainingJobs (and their status subresource) and Volcano's
`scheduling.volcano.sh/v1beta1` Queues and PodGroups; SchedulingV1Api for PriorityClasses.
Responses are read raw (`_preload_content=False`) and decoded as JSON, so the runtime sees
exactly what the API server sent — the same dicts `FakeCluster` hands out — without the
client's model classes in between. Requests are the client's own: paths, query parameters,
bodies and headers are whatever it builds (tests check them against a local HTTP stub).

What the client does not do by itself:
- patches are sent as `application/merge-patch+json` (the client would otherwise pick JSON
  Patch, which wants a list of operations);
- every call has a timeout (`request_timeout`); a refused connection is not retried, so an
  unreachable cluster fails fast with one line, not after minutes;
- an API server that is busy — 429 from API Priority and Fairness, 500/502/503/504, a read
  timeout — is asked again after a back-off with jitter (its `Retry-After` honoured), a few
  times within `retry_budget` seconds, before the call fails (issue 9, defect 3);
- a 403 from a ResourceQuota is `QuotaExceeded` (not now), not `Forbidden` (never);
- a 403 on a create in a namespace being deleted is `NotFound`: the namespace is as good as
  gone (a 404 follows once it is).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from caldera.errors import NotFound
from caldera.k8s import wirejson
from caldera.k8s.api import (
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    EvictionBlocked,
    Forbidden,
    Invalid,
    Object,
    QuotaExceeded,
    VolcanoMissing,
)
from caldera.trainingjob_api import GROUP, KIND, PLURAL, VERSION, api_message, kube_configuration

__all__ = ["POOL", "Expired", "KubeClusterAPI", "load_api_client"]

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
_MERGE_PATCH = "application/merge-patch+json"
_T = TypeVar("_T")
_BUSY = frozenset({429, 500, 502, 503, 504})
QUEUE_CONFLICT_TRIES = 5  # read-merge-replace rounds of apply_queue against a concurrent writer
POOL = 32  # connections per client: watches (one per informer) + writers + the Lease

# The client's signatures name its model classes (V1Pod, V1DeleteOptions, …); caldera sends
# the same objects as plain dicts in wire form, which the client serialises as they are.
client: Any = kubernetes.client
watch: Any = kubernetes.watch


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, else the in-cluster service account, else the
    default kubeconfig (KUBECONFIG, ~/.kube/config). One-line ClusterError otherwise."""
    configuration = kube_configuration(kubeconfig, context)
    configuration.retries = False  # fail fast: the controller loop retries on its own
    # Connections kept open: the informers' watches hold one each, the writers one each
    # (the client's default, 5 per CPU, would close and re-open TLS connections under load).
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, POOL)
    return client.ApiClient(configuration)


class _Busy(Exception):
    """The server asked to come back later (or did not answer in time)."""

    def __init__(self, message: str, retry_after: float | None = None, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.status = status


def _retry_after(error: ApiException) -> float | None:
    headers = error.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), 30.0) if value is not None else None
    except ValueError:
        return None


class Expired(ClusterError):
    """A watch's resourceVersion is too old (410 Gone): the cache must list again."""


def _lines(response: Any) -> Iterator[str]:
    """The lines of a streamed watch response, as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line.decode()
    if pending.strip():
        yield pending.decode()


def _message(error: ApiException) -> str:
    return api_message(error)


class KubeClusterAPI:
    """Implements `ClusterAPI` against a real API server."""

    def __init__(
        self,
        api_client: Any,
        request_timeout: float = 30.0,
        retry_budget: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api_client = api_client
        self.host = str(api_client.configuration.host)
        self.timeout = request_timeout
        self.retry_budget = retry_budget  # seconds of back-off one call may spend
        self.sleep = sleep
        self.requests = 0  # API requests sent (retries included)
        self.retries = 0
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.scheduling: Any = client.SchedulingV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.version: Any = client.VersionApi(api_client)
        self.admission: Any = client.AdmissionregistrationV1Api(api_client)

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None = None, context: str | None = None, timeout: float = 30.0
    ) -> KubeClusterAPI:
        return cls(load_api_client(kubeconfig, context), timeout)

    def close(self) -> None:
        """Close the client's connection pool."""
        self.api_client.close()

    # -- plumbing ----------------------------------------------------------------------------

    def _call(
        self, what: str, call: Callable[[], _T], volcano: bool = False, retry: bool = True
    ) -> _T:
        """Run one client call, asking a busy server again; turn failures into one-line
        ClusterErrors."""
        waited = 0.0
        attempt = 0
        while True:
            try:
                return self._once(what, call, volcano)
            except _Busy as busy:
                attempt += 1
                pause = busy.retry_after or min(0.2 * 2**attempt, 5.0)
                pause *= 1.0 + random.random() * 0.25  # jitter: controllers must not sync up
                if not retry or waited + pause > self.retry_budget:
                    raise ClusterUnavailable(busy.message) from None
                self.retries += 1
                self.sleep(pause)
                waited += pause

    def _once(self, what: str, call: Callable[[], _T], volcano: bool) -> _T:
        self.requests += 1
        try:
            return call()
        except ApiException as error:
            status = error.status or 0
            text = _message(error)
            if status == 404:
                # A missing CRD answers 404 "the server could not find the requested
                # resource"; a missing object names the object.
                if volcano and (not text or "could not find the requested resource" in text):
                    raise VolcanoMissing(
                        f"the Volcano CRDs are not installed ({VOLCANO_GROUP}/"
                        f"{VOLCANO_VERSION} not found on {self.host}): install Volcano first"
                    ) from None
                raise NotFound(what) from None
            if status == 429 and "disruption budget" in text:
                # The Eviction API's "no" from a PodDisruptionBudget: not a busy server,
                # asking again at once would only be refused again.
                raise EvictionBlocked(f"{what}: {text}") from None
            if status == 403 and "exceeded quota" in text:
                raise QuotaExceeded(f"{what}: {text}") from None
            if status == 403 and "because it is being terminated" in text:
                # A create in a namespace being deleted (NamespaceLifecycle): the namespace,
                # and every TrainingJob in it, is going away — as good as gone, not a refusal
                # of the request (which would fail the job, or spend a retry, for nothing).
                raise NotFound(f"{what}: {text}") from None
            if status in (401, 403):
                raise Forbidden(f"{what}: forbidden ({status}): {text}") from None
            if status == 409:
                raise ClusterConflict(f"{what}: {text or 'conflict'}") from None
            if status in (400, 415, 422):
                raise Invalid(f"{what}: {text or 'invalid'}") from None
            if status in _BUSY or status == 0:
                raise _Busy(
                    f"{what}: the API server at {self.host} answered {status}: {text}",
                    _retry_after(error),
                    status,
                ) from None
            raise ClusterError(f"{what}: HTTP {status}: {text}") from None
        except urllib3.exceptions.ReadTimeoutError:
            raise _Busy(f"{what}: the API server at {self.host} did not answer in time") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            text = " ".join(str(reason).split())
            if "refused" in text.lower():
                text = "connection refused"
            raise ClusterUnavailable(
                f"cannot reach the Kubernetes API at {self.host}: {text}"
            ) from None

    @staticmethod
    def _json(response: Any) -> Any:
        return wirejson.loads(response.data or b"null")  # bounded nesting: issue 34

    def _send(
        self, what: str, call: Callable[[], Any], volcano: bool = False, retry: bool = True
    ) -> None:
        """A call whose answer nobody reads. Read to its end all the same: a raw answer left
        unread keeps its connection out of the pool, so every delete, eviction and Event
        paid a new TLS handshake (and the API server with it)."""
        response = self._call(what, call, volcano, retry)
        getattr(response, "data", None)

    def _items(self, what: str, call: Callable[[], Any], volcano: bool = False) -> list[Object]:
        body = self._json(self._call(what, call, volcano))
        return list(body.get("items") or [])

    def _read(self, what: str, call: Callable[[], Any]) -> Object | None:
        try:
            found: Object = self._json(self._call(what, call))
        except NotFound:
            return None
        return found

    def _delete(self, what: str, call: Callable[[], Any], volcano: bool = False) -> bool:
        try:
            self._send(what, call, volcano)
        except NotFound:
            return False
        return True

    # -- ClusterAPI --------------------------------------------------------------------------

    def check(self, namespaces: Sequence[str]) -> None:
        t = self.timeout
        self._send(
            "GET /version",
            lambda: self.version.get_code(_request_timeout=t, _preload_content=False),
        )
        self._send(
            "list nodes",
            lambda: self.core.list_node(limit=1, _request_timeout=t, _preload_content=False),
        )
        for namespace in namespaces:
            try:
                # Not decoded: the first TrainingJob may be a tenant's deeply nested one, on
                # which the client's own decoder recurses (issue 34: a crash on every start).
                self._send(
                    f"list {PLURAL} in {namespace}",
                    partial(
                        self.custom.list_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        namespace,
                        PLURAL,
                        limit=1,
                        _request_timeout=t,
                        _preload_content=False,
                    ),
                )
            except NotFound:
                raise NotFound(
                    f"the TrainingJob CRD ({PLURAL}.{GROUP}) is not installed on "
                    f"{self.host}: apply `caldera k8s render --crds` first"
                ) from None
        try:
            self._call(
                "list Volcano queues",
                lambda: self.custom.list_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", limit=1, _request_timeout=t
                ),
                volcano=True,
            )
            for namespace in namespaces[:1]:
                self._call(
                    "list Volcano podgroups",
                    partial(
                        self.custom.list_namespaced_custom_object,
                        VOLCANO_GROUP,
                        VOLCANO_VERSION,
                        namespace,
                        "podgroups",
                        limit=1,
                        _request_timeout=t,
                    ),
                    volcano=True,
                )
        except NotFound:
            raise VolcanoMissing(
                f"the Volcano CRDs are not installed ({VOLCANO_GROUP}/{VOLCANO_VERSION} "
                f"queues/podgroups not found on {self.host}): install Volcano first"
            ) from None

    def list_nodes(self, label_selector: str = "") -> list[Object]:
        return self._items(
            "list nodes",
            lambda: self.core.list_node(
                label_selector=label_selector or None,
                _request_timeout=self.timeout,
                _preload_content=False,
            ),
        )

    def list_pods(
        self, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        options = {
            "label_selector": label_selector or None,
            "field_selector": field_selector or None,
            "_request_timeout": self.timeout,
            "_preload_content": False,
        }
        if namespace:
            return self._items(
                "list pods", lambda: self.core.list_namespaced_pod(namespace, **options)
            )
        return self._items("list pods", lambda: self.core.list_pod_for_all_namespaces(**options))

    def read_pod(self, namespace: str, name: str) -> Object | None:
        return self._read(
            f"read pod {namespace}/{name}",
            lambda: self.core.read_namespaced_pod(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_pod(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create pod {namespace}/{body['metadata']['name']}",
                lambda: self.core.create_namespaced_pod(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        options: Object = {"gracePeriodSeconds": grace_seconds}
        if uid:
            options["preconditions"] = {"uid": uid}
        return self._delete(
            f"delete pod {namespace}/{name}",
            lambda: self.core.delete_namespaced_pod(
                name, namespace, body=options, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        options: Object = {"gracePeriodSeconds": grace_seconds}
        if uid:
            options["preconditions"] = {"uid": uid}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        try:  # EvictionBlocked when a PodDisruptionBudget says no (a 429 naming the budget)
            self._send(
                f"evict pod {namespace}/{name}",
                lambda: self.core.create_namespaced_pod_eviction(
                    name, namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        except NotFound:
            return False
        return True

    def create_service(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create service {namespace}/{body['metadata']['name']}",
                lambda: self.core.create_namespaced_service(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def delete_service(self, namespace: str, name: str) -> bool:
        return self._delete(
            f"delete service {namespace}/{name}",
            lambda: self.core.delete_namespaced_service(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_pod_group(self, namespace: str, body: Object) -> Object:
        created: Object = self._call(
            f"create podgroup {namespace}/{body['metadata']['name']}",
            lambda: self.custom.create_namespaced_custom_object(
                VOLCANO_GROUP,
                VOLCANO_VERSION,
                namespace,
                "podgroups",
                body,
                _request_timeout=self.timeout,
            ),
            volcano=True,
        )
        return created

    def delete_pod_group(self, namespace: str, name: str) -> bool:
        return self._delete(
            f"delete podgroup {namespace}/{name}",
            lambda: self.custom.delete_namespaced_custom_object(
                VOLCANO_GROUP,
                VOLCANO_VERSION,
                namespace,
                "podgroups",
                name,
                body={"propagationPolicy": "Background"},
                _request_timeout=self.timeout,
            ),
            volcano=True,
        )

    def list_jobs(self, namespace: str) -> list[Object]:
        return self._items(
            f"list {PLURAL} in {namespace}",
            lambda: self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                _request_timeout=self.timeout,
                _preload_content=False,
            ),
        )

    def patch_job_status(self, namespace: str, name: str, status: Object) -> Object:
        patched: Object = self._json(
            self._call(
                f"update the status of {KIND} {namespace}/{name}",
                lambda: self.custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    {"status": status},
                    _content_type=_MERGE_PATCH,
                    _request_timeout=self.timeout,
                    _preload_content=False,
                ),
            )
        )
        return patched

    def create_event(self, namespace: str, body: Object) -> None:
        self._send(
            f"create event in {namespace}",
            lambda: self.core.create_namespaced_event(
                namespace, body, _request_timeout=self.timeout, _preload_content=False
            ),
            retry=False,
        )

    def read_admission_policy(self, name: str) -> tuple[Object | None, Object | None]:
        t = self.timeout
        policy = self._read(
            f"read validatingadmissionpolicy {name}",
            lambda: self.admission.read_validating_admission_policy(
                name, _request_timeout=t, _preload_content=False
            ),
        )
        binding = self._read(
            f"read validatingadmissionpolicybinding {name}",
            lambda: self.admission.read_validating_admission_policy_binding(
                name, _request_timeout=t, _preload_content=False
            ),
        )
        return policy, binding

    def read_config_map(self, namespace: str, name: str) -> Object | None:
        return self._read(
            f"read configmap {namespace}/{name}",
            lambda: self.core.read_namespaced_config_map(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_config_map(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create configmap {namespace}/{body['metadata']['name']}",
                lambda: self.core.create_namespaced_config_map(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def patch_config_map(self, namespace: str, name: str, patch: Object) -> Object:
        what = f"patch configmap {namespace}/{name}"
        try:
            patched: Object = self._json(
                self._call(
                    what,
                    lambda: self.core.patch_namespaced_config_map(
                        name,
                        namespace,
                        patch,
                        _content_type=_MERGE_PATCH,
                        _request_timeout=self.timeout,
                        _preload_content=False,
                    ),
                )
            )
        except NotFound:
            raise Invalid(f"{what}: not found") from None
        return patched

    # -- leases (leader election) ----------------------------------------------------------

    def read_lease(self, namespace: str, name: str) -> Object | None:
        return self._read(
            f"read lease {namespace}/{name}",
            lambda: self.coordination.read_namespaced_lease(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_lease(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create lease {namespace}/{body['metadata']['name']}",
                lambda: self.coordination.create_namespaced_lease(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def replace_lease(self, namespace: str, name: str, body: Object) -> Object:
        replaced: Object = self._json(
            self._call(
                f"renew lease {namespace}/{name}",
                lambda: self.coordination.replace_namespaced_lease(
                    name, namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return replaced

    def list_queues(self) -> list[Object]:
        found = self._call(
            "list Volcano queues",
            lambda: self.custom.list_cluster_custom_object(
                VOLCANO_GROUP, VOLCANO_VERSION, "queues", _request_timeout=self.timeout
            ),
            volcano=True,
        )
        return list(found.get("items") or [])

    def read_queue(self, name: str) -> Object | None:
        try:
            found: Object = self._json(
                self._call(
                    f"read Volcano queue {name}",
                    lambda: self.custom.get_cluster_custom_object(
                        VOLCANO_GROUP,
                        VOLCANO_VERSION,
                        "queues",
                        name,
                        _request_timeout=self.timeout,
                        _preload_content=False,
                    ),
                    volcano=True,
                )
            )
        except NotFound:
            return None
        return found

    def apply_queue(self, body: Object) -> None:
        # Volcano's queue controller writes the Queue too (its status, right after it is
        # created): a replace made from an older read is refused with 409, so read again.
        for _ in range(QUEUE_CONFLICT_TRIES - 1):
            try:
                return self._apply_queue_once(body)
            except ClusterConflict:
                continue
        return self._apply_queue_once(body)

    def _apply_queue_once(self, body: Object) -> None:
        name = body["metadata"]["name"]
        what = f"queue {name}"
        try:
            existing = self._call(
                f"read {what}",
                lambda: self.custom.get_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", name, _request_timeout=self.timeout
                ),
                volcano=True,
            )
        except NotFound:
            self._call(
                f"create {what}",
                lambda: self.custom.create_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", body, _request_timeout=self.timeout
                ),
                volcano=True,
            )
            return
        # Replace the spec; keep what others wrote in metadata (labels, annotations).
        metadata = dict(existing.get("metadata") or {})
        for key in ("labels", "annotations"):
            metadata[key] = {**(metadata.get(key) or {}), **(body["metadata"].get(key) or {})}
        replacement = {**body, "metadata": metadata}
        self._call(
            f"replace {what}",
            lambda: self.custom.replace_cluster_custom_object(
                VOLCANO_GROUP,
                VOLCANO_VERSION,
                "queues",
                name,
                replacement,
                _request_timeout=self.timeout,
            ),
            volcano=True,
        )

    def apply_priority_class(self, body: Object) -> None:
        name = body["metadata"]["name"]
        existing = self._read(
            f"read priorityclass {name}",
            lambda: self.scheduling.read_priority_class(
                name, _request_timeout=self.timeout, _preload_content=False
            ),
        )
        if existing is None:
            self._call(
                f"create priorityclass {name}",
                lambda: self.scheduling.create_priority_class(
                    body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
            return
        have = (existing.get("value"), existing.get("preemptionPolicy", "PreemptLowerPriority"))
        want = (body["value"], body.get("preemptionPolicy"))
        if have != want:
            raise ClusterConflict(
                f"PriorityClass {name} exists with value {have[0]} and policy {have[1]}; caldera "
                f"needs {want[0]} and {want[1]} (Kubernetes cannot change them: delete it first)"
            )

    def _list_jobs_raw(self, namespace: str, **options: Any) -> Any:
        return self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, **options
        )

    def _lister(self, kind: str, namespace: str) -> Callable[..., Any]:
        if kind == "nodes":
            return cast(Callable[..., Any], self.core.list_node)
        if kind == "pods":
            if namespace:
                return partial(self.core.list_namespaced_pod, namespace)
            return cast(Callable[..., Any], self.core.list_pod_for_all_namespaces)
        if kind == PLURAL:
            return partial(self._list_jobs_raw, namespace)
        raise ValueError(f"cannot list {kind}")

    def list_objects(
        self, kind: str, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[Object], str]:
        """Every object of `kind` (pods, nodes, trainingjobs) and the list's resourceVersion,
        from which a watch carries on."""
        lister = self._lister(kind, namespace)
        body = self._json(
            self._call(
                f"list {kind}",
                lambda: lister(
                    label_selector=label_selector or None,
                    field_selector=field_selector or None,
                    _request_timeout=self.timeout,
                    _preload_content=False,
                ),
            )
        )
        return list(body.get("items") or []), str(body["metadata"].get("resourceVersion", ""))

    def watch_objects(
        self,
        kind: str,
        namespace: str,
        label_selector: str,
        field_selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> Iterator[tuple[str, Object]]:
        """(type, object) from `resource_version` on, with bookmarks, until `timeout_seconds`
        pass. `Expired` when the version is too old (410 Gone): list again."""
        lister = self._lister(kind, namespace)
        response = self._call(
            f"watch {kind}",
            lambda: lister(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                label_selector=label_selector or None,
                field_selector=field_selector or None,
                timeout_seconds=timeout_seconds,
                _request_timeout=(self.timeout, timeout_seconds + self.timeout),
                _preload_content=False,
            ),
        )
        try:
            for line in _lines(response):
                event = wirejson.loads(line)
                kind_of = str(event.get("type", ""))
                obj = event.get("object") or {}
                if kind_of == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired(f"watch {kind}: {obj.get('message', 'too old')}")
                    raise ClusterError(f"watch {kind}: {obj.get('message', obj)}")
                yield kind_of, obj
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ClusterUnavailable(f"watch {kind} on {self.host}: {error}") from None
        finally:
            response.close()
            response.release_conn()

    def watch(
        self, kind: str, namespace: str, label_selector: str, timeout_seconds: int
    ) -> Iterator[str]:
        functions: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "pods": (self.core.list_namespaced_pod, self.core.list_pod_for_all_namespaces),
            PLURAL: (self._list_jobs_raw, self._list_jobs_raw),
            "nodes": (self.core.list_node, self.core.list_node),
        }
        namespaced, everywhere = functions[kind]
        args: tuple[Any, ...] = (namespace,) if namespace and kind != "nodes" else ()
        function = namespaced if args else everywhere
        stream = watch.Watch().stream(
            function,
            *args,
            label_selector=label_selector or None,
            timeout_seconds=timeout_seconds,
            _request_timeout=timeout_seconds + self.timeout,
            deserialize=False,
        )
        events: Iterator[dict[str, Any]] = self._call(f"watch {kind}", lambda: iter(stream))
        while True:
            try:
                event = self._call(f"watch {kind}", lambda: next(events))
            except StopIteration:
                return
            yield str(event.get("type", ""))
