"""Lists and watches for the informer cache (`caldera.k8s.cluster.cache`): every object of a kind
with the list's resourceVersion, then the changes from there, streamed as the API server
sends them (bookmarks included). A watch whose version is too old ends in `Expired` (410
Gone): the cache lists again. `caldera.k8s.cluster.client.KubeClusterAPI` is built on this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, cast

import kubernetes
import urllib3

from caldera.k8s.cluster import wirejson
from caldera.k8s.cluster.api import ClusterError, ClusterUnavailable, Object
from caldera.k8s.cluster.transport import ApiTransport
from caldera.trainingjob_api import GROUP, PLURAL, VERSION

__all__ = ["Expired", "ListWatch"]

watch: Any = kubernetes.watch


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


class ListWatch(ApiTransport):
    """`list_objects`, `watch_objects` and `watch` of `ClusterAPI`."""

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
