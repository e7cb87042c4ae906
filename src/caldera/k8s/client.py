"""`KubeClusterAPI`: the `ClusterAPI` seam on the official `kubernetes` Python client.

CoreV1Api for nodes, pods, Services and ConfigMaps; CustomObjectsApi for Volcano's
`scheduling.volcano.sh/v1beta1` Queues and PodGroups; SchedulingV1Api for PriorityClasses.
Responses are read raw (`_preload_content=False`) and decoded as JSON, so the runtime sees
exactly what the API server sent — the same dicts `FakeCluster` hands out — without the
client's model classes in between. Requests are the client's own: paths, query parameters,
bodies and headers are whatever it builds (tests check them against a local HTTP stub).

Two details the client does not do by itself:
- a ConfigMap patch is sent as `application/merge-patch+json` (the client would otherwise
  pick JSON Patch, which wants a list of operations);
- every call has a timeout (`request_timeout`) and connection errors are not retried, so an
  unreachable cluster fails fast with one line, not after minutes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from caldera.errors import NotFound
from caldera.k8s.api import (
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    Forbidden,
    Invalid,
    Object,
    VolcanoMissing,
)

__all__ = ["KubeClusterAPI", "load_api_client"]

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
_MERGE_PATCH = "application/merge-patch+json"
_T = TypeVar("_T")

# The client's signatures name its model classes (V1Pod, V1DeleteOptions, …); caldera sends
# the same objects as plain dicts in wire form, which the client serialises as they are.
client: Any = kubernetes.client
config: Any = kubernetes.config
watch: Any = kubernetes.watch


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, else the in-cluster service account, else the
    default kubeconfig (KUBECONFIG, ~/.kube/config). One-line ClusterError otherwise."""
    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                config.load_kube_config(context=context, client_configuration=configuration)
    except (ConfigException, OSError, ValueError, TypeError) as error:
        where = kubeconfig or "the in-cluster service account or ~/.kube/config"
        text = " ".join(str(error).split()) or error.__class__.__name__
        raise ClusterError(f"cannot load a Kubernetes configuration from {where}: {text}") from None
    configuration.retries = False  # fail fast: the controller loop retries on its own
    return client.ApiClient(configuration)


def _message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "")
        text = str(body.get("message") or "")
    except (ValueError, AttributeError):
        text = ""
    return " ".join((text or str(error.reason or "")).split())


class KubeClusterAPI:
    """Implements `ClusterAPI` against a real API server."""

    def __init__(self, api_client: Any, request_timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.host = str(api_client.configuration.host)
        self.timeout = request_timeout
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.scheduling: Any = client.SchedulingV1Api(api_client)
        self.version: Any = client.VersionApi(api_client)

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None = None, context: str | None = None, timeout: float = 30.0
    ) -> KubeClusterAPI:
        return cls(load_api_client(kubeconfig, context), timeout)

    def close(self) -> None:
        """Close the client's connection pool."""
        self.api_client.close()

    # -- plumbing ----------------------------------------------------------------------------

    def _call(self, what: str, call: Callable[[], _T], volcano: bool = False) -> _T:
        """Run one client call; turn its failures into one-line ClusterErrors."""
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
            if status in (401, 403):
                raise Forbidden(f"{what}: forbidden ({status}): {text}") from None
            if status == 409:
                raise ClusterConflict(f"{what}: {text or 'conflict'}") from None
            if status in (400, 415, 422):
                raise Invalid(f"{what}: {text or 'invalid'}") from None
            if status == 0 or status >= 500:
                raise ClusterUnavailable(
                    f"{what}: the API server at {self.host} answered {status}: {text}"
                ) from None
            raise ClusterError(f"{what}: HTTP {status}: {text}") from None
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
        return json.loads(response.data or b"null")

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
            self._call(what, call, volcano)
        except NotFound:
            return False
        return True

    # -- ClusterAPI --------------------------------------------------------------------------

    def check(self, namespace: str) -> None:
        t = self.timeout
        self._call(
            "GET /version",
            lambda: self.version.get_code(_request_timeout=t, _preload_content=False),
        )
        self._call(
            "list nodes",
            lambda: self.core.list_node(limit=1, _request_timeout=t, _preload_content=False),
        )
        try:
            self._call(
                "list Volcano queues",
                lambda: self.custom.list_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", limit=1, _request_timeout=t
                ),
                volcano=True,
            )
            if namespace:
                self._call(
                    "list Volcano podgroups",
                    lambda: self.custom.list_namespaced_custom_object(
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

    def list_config_maps(self, namespace: str, label_selector: str = "") -> list[Object]:
        options = {
            "label_selector": label_selector or None,
            "_request_timeout": self.timeout,
            "_preload_content": False,
        }
        if namespace:
            return self._items(
                "list configmaps",
                lambda: self.core.list_namespaced_config_map(namespace, **options),
            )
        return self._items(
            "list configmaps", lambda: self.core.list_config_map_for_all_namespaces(**options)
        )

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

    def list_queues(self) -> list[Object]:
        found = self._call(
            "list Volcano queues",
            lambda: self.custom.list_cluster_custom_object(
                VOLCANO_GROUP, VOLCANO_VERSION, "queues", _request_timeout=self.timeout
            ),
            volcano=True,
        )
        return list(found.get("items") or [])

    def apply_queue(self, body: Object) -> None:
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

    def watch(
        self, kind: str, namespace: str, label_selector: str, timeout_seconds: int
    ) -> Iterator[str]:
        functions: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "pods": (self.core.list_namespaced_pod, self.core.list_pod_for_all_namespaces),
            "configmaps": (
                self.core.list_namespaced_config_map,
                self.core.list_config_map_for_all_namespaces,
            ),
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
