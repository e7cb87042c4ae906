"""Just enough of the Kubernetes REST API, on 127.0.0.1, to run the official client against.

It stores objects per collection (`/api/v1/namespaces/NS/pods`, `/apis/G/V/queues`, …),
lists them with label and field selectors, creates (409 on a duplicate), replaces,
merge-patches (and insists on `application/merge-patch+json`), deletes (honouring a uid
precondition; with `graceful` pods keep a deletionTimestamp until the test removes them),
streams a watch as one event per object, and answers `/version`. Every request is recorded
— method, path, query, headers and decoded body — for tests to compare with what the API
expects. With `volcano=False` the Volcano groups answer 404 like a cluster without the CRDs.
`fail(method, path, status, message)` makes one path answer an error.

Nothing in caldera imports this: it is the other side of the wire, written from the API's
documented behaviour, so a request the client builds wrongly shows up here as a failure.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from caldera.k8s.cluster.fake import field_selector_matches, label_selector_matches, merge_patch

__all__ = ["Recorded", "StubAPIServer"]

CLUSTER_SCOPED = frozenset({"nodes", "namespaces", "priorityclasses", "queues"})
VOLCANO_GROUPS = frozenset({"scheduling.volcano.sh", "batch.volcano.sh"})

Key = tuple[str, str, str, str]  # group/version, plural, namespace ("" if none), name


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")


@dataclass
class StubAPIServer:
    volcano: bool = True
    graceful: bool = False
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    # (method, path) → (status, message, times left: None = always, Retry-After seconds)
    failures: dict[tuple[str, str], tuple[int, str, int | None, float | None]] = field(
        default_factory=dict
    )
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    # Every change, for watches from a resourceVersion: (version, key, type, object, before).
    changes: list[tuple[int, Key, str, dict[str, Any], dict[str, Any] | None]] = field(
        default_factory=list
    )
    compacted: int = 0  # a watch from an older version is answered 410 Gone
    connections: int = 0  # TCP connections clients opened (keep-alive reuses one)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    handler_errors: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> StubAPIServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # keep-alive + delayed ACK would add 40 ms a call

            def setup(self) -> None:
                super().setup()
                with stub._lock:
                    stub.connections += 1

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                stub._serve(self, raw)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # Keep it off stderr (the CLI tests read stderr): a client that hangs up
                # early is the client's business; anything else stays inspectable.
                stub.handler_errors.append(traceback.format_exc())

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- test helpers --------------------------------------------------------------------------

    def _changed(self, key: Key, kind: str, obj: dict[str, Any]) -> None:
        """Record a change (caller holds the lock): a new resourceVersion, and the event."""
        version = next(self._ids)
        before = next((o for _, k, _, o, _ in reversed(self.changes) if k == key), None)
        obj.setdefault("metadata", {})["resourceVersion"] = str(version)
        self.changes.append((version, key, kind, copy.deepcopy(obj), before))

    def compact(self) -> None:
        """Forget the change log, as etcd's compaction does: older watches get 410."""
        with self._lock:
            self.compacted = next(self._ids)
            self.changes.clear()

    def put(
        self, api: str, plural: str, obj: dict[str, Any], namespace: str = ""
    ) -> dict[str, Any]:
        """Store an object as if it had been created (nodes, pods of other workloads…)."""
        stored = copy.deepcopy(obj)
        metadata = stored.setdefault("metadata", {})
        if namespace:
            metadata["namespace"] = namespace
        metadata.setdefault("uid", f"stub-uid-{next(self._ids)}")
        key = (api, plural, namespace, metadata["name"])
        with self._lock:
            self._changed(key, "MODIFIED" if key in self.objects else "ADDED", stored)
            self.objects[key] = stored
        return stored

    def get(self, api: str, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            found = self.objects.get((api, plural, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def update(
        self, api: str, plural: str, name: str, namespace: str, change: dict[str, Any]
    ) -> None:
        with self._lock:
            key = (api, plural, namespace, name)
            self.objects[key] = merge_patch(self.objects[key], change)
            self._changed(key, "MODIFIED", self.objects[key])

    def remove(self, api: str, plural: str, name: str, namespace: str = "") -> None:
        with self._lock:
            key = (api, plural, namespace, name)
            gone = self.objects.pop(key, None)
            if gone is not None:
                self._changed(key, "DELETED", gone)

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        message: str,
        times: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer `status` on this path (`times` times, or always), with `Retry-After`."""
        self.failures[(method, path)] = (status, message, times, retry_after)

    def calls(self, method: str | None = None, contains: str = "") -> list[Recorded]:
        return [
            r
            for r in self.requests
            if (method is None or r.method == method) and contains in r.path
        ]

    # -- serving -------------------------------------------------------------------------------

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _status(
        self,
        handler: BaseHTTPRequestHandler,
        code: int,
        message: str,
        retry_after: float | None = None,
    ) -> None:
        reason = {404: "NotFound", 409: "Conflict", 415: "UnsupportedMediaType"}.get(code, "")
        self._send(
            handler,
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": code,
            },
            {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None,
        )

    def _serve(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        split = urlsplit(handler.path)
        query = parse_qs(split.query)
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in handler.headers.items()}
        method = handler.command
        self.requests.append(Recorded(method, split.path, query, headers, body))
        failure = self.failures.get((method, split.path))
        if failure is not None:
            code, message, times, retry_after = failure
            if times is not None:
                if times <= 1:
                    del self.failures[(method, split.path)]
                else:
                    self.failures[(method, split.path)] = (code, message, times - 1, retry_after)
            self._status(handler, code, message, retry_after)
            return
        if split.path.rstrip("/") == "/version":
            self._send(handler, 200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0"})
            return
        parts = [p for p in split.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            api, rest = "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            api, rest = f"{parts[1]}/{parts[2]}", parts[3:]
            if parts[1] in VOLCANO_GROUPS and not self.volcano:
                self._status(handler, 404, "the server could not find the requested resource")
                return
        else:
            self._status(handler, 404, "the server could not find the requested resource")
            return
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name = rest[0], (rest[1] if len(rest) > 1 else "")
        subresource = rest[2] if len(rest) > 2 else ""
        with self._lock:
            if subresource == "status" and method == "PATCH":
                self._patch(handler, (api, plural, namespace, name), body, headers, status=True)
            elif subresource == "eviction" and method == "POST":
                options = (body or {}).get("deleteOptions") or {}
                self._delete(handler, (api, plural, namespace, name), options, query)
            elif subresource:
                self._status(handler, 404, "the server could not find the requested resource")
            elif method == "GET" and not name:
                self._list(handler, api, plural, namespace, query)
            elif method == "GET":
                self._read(handler, (api, plural, namespace, name))
            elif method == "POST":
                self._create(handler, api, plural, namespace, body)
            elif method == "PUT":
                self._replace(handler, (api, plural, namespace, name), body)
            elif method == "PATCH":
                self._patch(handler, (api, plural, namespace, name), body, headers)
            elif method == "DELETE":
                self._delete(handler, (api, plural, namespace, name), body, query)

    def _list(
        self,
        handler: BaseHTTPRequestHandler,
        api: str,
        plural: str,
        namespace: str,
        query: dict[str, list[str]],
    ) -> None:
        labels = query.get("labelSelector", [""])[0]
        fields = query.get("fieldSelector", [""])[0]
        items = [
            copy.deepcopy(obj)
            for (a, p, ns, _), obj in sorted(self.objects.items())
            if a == api
            and p == plural
            and (not namespace or ns == namespace)
            and label_selector_matches(obj["metadata"].get("labels") or {}, labels)
            and field_selector_matches(obj, fields)
        ]
        limit = query.get("limit")
        if limit:
            items = items[: int(limit[0])]
        since = query.get("resourceVersion", [""])[0]
        if query.get("watch", ["false"])[0] == "true" and since:
            events = self._events_since(int(since), api, plural, namespace, labels, fields)
            if query.get("allowWatchBookmarks", ["false"])[0] == "true":
                latest = max([int(since), *(c[0] for c in self.changes)])
                bookmark = {"metadata": {"resourceVersion": str(latest)}}
                events.append({"type": "BOOKMARK", "object": bookmark})
            data = "".join(json.dumps(e) + "\n" for e in events).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        if query.get("watch", ["false"])[0] == "true":
            lines = "".join(json.dumps({"type": "ADDED", "object": o}) + "\n" for o in items)
            data = lines.encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        self._send(
            handler,
            200,
            {
                "kind": "List",
                "apiVersion": api,
                "metadata": {
                    "resourceVersion": str(max([self.compacted, *(c[0] for c in self.changes)]))
                },
                "items": items,
            },
        )

    def _events_since(
        self, since: int, api: str, plural: str, namespace: str, labels: str, fields: str
    ) -> list[dict[str, Any]]:
        if since < self.compacted:
            gone = {
                "code": 410,
                "reason": "Expired",
                "message": f"too old resource version: {since}",
            }
            return [{"type": "ERROR", "object": gone}]

        def matches(obj: dict[str, Any] | None) -> bool:
            return (
                obj is not None
                and label_selector_matches(obj["metadata"].get("labels") or {}, labels)
                and field_selector_matches(obj, fields)
            )

        events = []
        for version, (a, p, ns, _), kind, obj, before in self.changes:
            if version <= since or a != api or p != plural or (namespace and ns != namespace):
                continue
            if matches(obj):
                events.append({"type": kind, "object": obj})
            elif matches(before):  # it stopped matching the selectors: gone, for this watch
                events.append({"type": "DELETED", "object": obj})
        return events

    def _read(self, handler: BaseHTTPRequestHandler, key: Key) -> None:
        found = self.objects.get(key)
        if found is None:
            self._status(handler, 404, f'{key[1]} "{key[3]}" not found')
            return
        self._send(handler, 200, found)

    def _create(
        self, handler: BaseHTTPRequestHandler, api: str, plural: str, namespace: str, body: Any
    ) -> None:
        obj = copy.deepcopy(body)
        metadata = obj.setdefault("metadata", {})
        if "name" not in metadata and "generateName" in metadata:
            metadata["name"] = f"{metadata['generateName']}{next(self._ids):x}"
        key = (api, plural, namespace, metadata["name"])
        if key in self.objects:
            self._status(handler, 409, f'{plural} "{metadata["name"]}" already exists')
            return
        if namespace:
            metadata["namespace"] = namespace
        metadata["uid"] = f"stub-uid-{next(self._ids)}"
        metadata["resourceVersion"] = str(next(self._ids))
        metadata["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if plural == "pods":
            obj.setdefault("status", {"phase": "Pending"})
        self.objects[key] = obj
        self._changed(key, "ADDED", obj)
        self._send(handler, 201, obj)

    def _replace(self, handler: BaseHTTPRequestHandler, key: Key, body: Any) -> None:
        if key not in self.objects:
            self._status(handler, 404, f'{key[1]} "{key[3]}" not found')
            return
        obj = copy.deepcopy(body)
        self.objects[key] = obj
        self._changed(key, "MODIFIED", obj)
        self._send(handler, 200, obj)

    def _patch(
        self,
        handler: BaseHTTPRequestHandler,
        key: Key,
        body: Any,
        headers: dict[str, str],
        status: bool = False,
    ) -> None:
        if headers.get("content-type") != "application/merge-patch+json":
            self._status(handler, 415, f"unsupported patch type {headers.get('content-type')}")
            return
        if key not in self.objects:
            self._status(handler, 404, f'{key[1]} "{key[3]}" not found')
            return
        if status:  # the status subresource changes the status only
            body = {"status": (body or {}).get("status")}
        elif "status" in (body or {}) and key[1] not in ("pods", "nodes"):
            body = {k: v for k, v in body.items() if k != "status"}  # dropped, as for CRDs
        self.objects[key] = merge_patch(self.objects[key], body)
        self._changed(key, "MODIFIED", self.objects[key])
        self._send(handler, 200, self.objects[key])

    def _delete(
        self, handler: BaseHTTPRequestHandler, key: Key, body: Any, query: dict[str, list[str]]
    ) -> None:
        found = self.objects.get(key)
        if found is None:
            self._status(handler, 404, f'{key[1]} "{key[3]}" not found')
            return
        options = body or {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid is not None and uid != found["metadata"].get("uid"):
            self._status(handler, 409, "Precondition failed: UID in precondition")
            return
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds", [None])[0])
        if self.graceful and key[1] == "pods" and grace not in (None, 0, "0"):
            found["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
            found["metadata"]["deletionGracePeriodSeconds"] = int(grace)
            self._changed(key, "MODIFIED", found)
        else:
            del self.objects[key]
            self._changed(key, "DELETED", found)
        self._send(handler, 200, found)
