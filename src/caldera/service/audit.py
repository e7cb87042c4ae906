"""The audit log: one row per state-changing request (who, what, when, from where, outcome).

`AuditLog` is ASGI middleware around the API. For every request that is not a read (any
method but GET, HEAD, OPTIONS), whatever its outcome (401 and 429 included), it records the
caller (the user the bearer token names; none for a missing or unknown token), the client
address, method and path, the action (`submit`, `cancel`, `queue_state`, or the method and
path), the target (job id or queue), the HTTP status and a few details: the submission's
queue, type, tasks, GPUs and name, or the error's one-line reason. Never the request's
`env` or `command`, which may hold secrets.

The row is committed **before the response leaves**: a client that saw its answer can find it
in the log, even after a `kill -9`. Concurrent requests share one commit (a writer thread
takes everything queued), so the log costs one commit per burst, not per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from caldera.service.printable import printable
from caldera.service.store import Store

__all__ = ["AuditLog", "AuditWriter", "clean_text"]

log = logging.getLogger("caldera.service")

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_CAPTURE = 64 * 1024  # bytes of a request or response body looked at for the details
_SUBMIT_FIELDS = ("queue", "type", "tasks", "gpus", "name")


def clean_text(value: object, limit: int = 255) -> str:
    """Printable, bounded text for the log (see `printable`)."""
    return printable(value, limit)


class AuditWriter:
    """A thread that commits queued audit rows in batches and tells each waiter when its row
    is durable."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: queue.SimpleQueue[tuple[dict[str, Any], Callable[[], None]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name="caldera-audit", daemon=True)
        self._thread.start()

    def write(self, row: dict[str, Any], done: Callable[[], None]) -> None:
        self._queue.put((row, done))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            try:
                with self.store.batch() as writes:
                    writes.audit([row for row, _ in batch])
            except Exception:  # the database is away: say so, never hold the answer back
                log.exception("could not write %d audit row(s)", len(batch))
            for _, done in batch:
                done()
            if stop:
                return


def _action(method: str, parts: list[str]) -> tuple[str, str | None]:
    """(action, target) of an API path split on '/', e.g. ['v1', 'jobs', 'j-1', 'cancel']."""
    if len(parts) >= 2 and parts[1] == "jobs":
        if len(parts) == 2 and method == "POST":
            return "submit", None
        if len(parts) == 3 and method == "DELETE":
            return "cancel", parts[2]
        if len(parts) == 4 and parts[3] == "cancel" and method == "POST":
            return "cancel", parts[2]
    if len(parts) == 3 and parts[1] == "queues" and method == "PATCH":
        return "queue_state", parts[2]
    return f"{method} {'/'.join(parts[1:2])}".lower().strip(), parts[2] if len(parts) > 2 else None


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None


class AuditLog:
    """ASGI middleware: an audit row for every request that changes state."""

    def __init__(
        self,
        app: Any,
        writer: AuditWriter,
        tokens: Mapping[str, Any],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.writer = writer
        self.tokens = tokens
        self.clock = clock

    def _user(self, scope: Any) -> str | None:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    who = self.tokens.get(token.strip())
                    return who.user if who is not None else None
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in _READS:
            await self.app(scope, receive, send)
            return
        began = self.clock()
        body = bytearray()

        async def receive_and_keep() -> Any:
            message = await receive()
            if message["type"] == "http.request" and len(body) < _CAPTURE:
                body.extend(message.get("body", b"")[: _CAPTURE - len(body)])
            return message

        held: list[Any] = []
        answer = bytearray()
        status = 500

        async def send_after_audit(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                held.append(message)
                return
            if message["type"] == "http.response.body" and held:
                if len(answer) < _CAPTURE:
                    answer.extend(message.get("body", b"")[: _CAPTURE - len(answer)])
                held.append(message)
                if message.get("more_body", False) and len(answer) < _CAPTURE:
                    return
                await self._record(scope, began, status, bytes(body), bytes(answer))
                pending, held[:] = list(held), []
                for part in pending:
                    await send(part)
                return
            await send(message)

        try:
            await self.app(scope, receive_and_keep, send_after_audit)
        finally:
            if held:  # the app ended without finishing its answer
                await self._record(scope, began, status, bytes(body), bytes(answer))
                for part in held:
                    await send(part)

    async def _record(
        self, scope: Any, began: float, status: int, body: bytes, answer: bytes
    ) -> None:
        method = scope["method"]
        path = scope.get("path", "")
        action, target = _action(method, [p for p in path.split("/") if p])
        detail: dict[str, Any] = {}
        request = _json(body) if body else None
        response = _json(answer) if answer else None
        if action == "submit" and isinstance(request, dict):
            for key in _SUBMIT_FIELDS:
                if key in request and isinstance(request[key], str | int | float):
                    value = request[key]
                    detail[key] = clean_text(value, 128) if isinstance(value, str) else value
            if isinstance(request.get("labels"), dict):
                detail["labels"] = sorted(clean_text(k, 64) for k in request["labels"])[:32]
        elif action == "queue_state" and isinstance(request, dict) and "state" in request:
            detail["state"] = clean_text(request["state"], 32)
        if isinstance(response, dict):
            if status >= 400 and "detail" in response:
                detail["error"] = clean_text(response["detail"], 500)
            elif action == "submit" and isinstance(response.get("id"), str):
                target = response["id"]
                # What was accepted, defaults filled in.
                for key, field in (("type", "type"), ("tasks", "tasks"), ("gpus", "gpus_per_task")):
                    if isinstance(response.get(field), str | int | float):
                        detail[key] = response[field]
        client = scope.get("client")
        row = {
            "t": began,
            "user": self._user(scope),
            "client": clean_text(client[0], 64) if client else None,
            "method": clean_text(method, 8),
            "path": clean_text(path, 512),
            "action": clean_text(action, 32),
            "target": clean_text(target, 255) if target is not None else None,
            "status": status,
            "detail": detail,
        }
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def committed() -> None:
            loop.call_soon_threadsafe(settle)

        self.writer.write(row, committed)
        await done
