"""The audit log: one row per state-changing request (who, what, when, from where, outcome).

`AuditLog` is ASGI middleware around the API. For every request that is not a read (any
method but GET, HEAD, OPTIONS), whatever its outcome (401 and 429 included), it records the
caller (the user the bearer token names; none for a missing or unknown token), the client
address, method and path, the action (`submit`, `cancel`, `queue_state`, or the method and
path), the target (job id or queue), the HTTP status and a few details: the submission's
queue, type, tasks, GPUs and name, or the error's one-line reason. Never the request's
`env` or `command`, which may hold secrets.

The row is committed **before the response leaves**: a client that saw its answer can find it
in the log, even after a `kill -9`. An accepted submission's row is written in the
submission's own transaction (the route asks `AuditEntry.accepted` for it and the runtime
inserts it beside the job's row): the job and its audit row are committed together or not at
all, for one commit per submission. Every other row (refusals, failures, cancels, queue
changes) goes through a writer thread: concurrent requests share one commit (it takes
everything queued), so those cost one commit per burst, not per request.

Failed authentications are tallied, not logged one by one (`FailureTally`): in each window
(a minute) the first 401 or 429 of a caller without a known token, per client address and
reason, is its own row as above; the others are counted, and when the window ends one
`auth_failures` row says how many there were, the first and the last time. A flood of bad
tokens thus writes at most two rows a minute per address and reason, never one per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from caldera.service.intake import GroupWorker
from caldera.service.printable import printable
from caldera.service.store import Store

__all__ = ["AuditEntry", "AuditLog", "AuditWriter", "FailureTally", "audit_entry", "clean_text"]

log = logging.getLogger("caldera.service")

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_CAPTURE = 64 * 1024  # bytes of a request or response body looked at for the details
_SUBMIT_FIELDS = ("queue", "type", "tasks", "gpus", "name")
_ACCEPTED_FIELDS = (("type", "type"), ("tasks", "tasks"), ("gpus", "gpus_per_task"))
_SCOPE_KEY = "caldera.audit"  # where a request's AuditEntry waits for its route


def clean_text(value: object, limit: int = 255) -> str:
    """Printable, bounded text for the log (see `printable`)."""
    return printable(value, limit)


class FailureTally:
    """Failed authentications per (client address, status, reason) in windows of `window`
    seconds. `first(row)`: is this the window's first (write it), or one more to count?
    `ended(now)`: the tally rows of the windows that ended. At most `keys` tallies are kept
    at once: past that, new addresses are counted under the client `*`."""

    def __init__(self, window: float = 60.0, keys: int = 10_000) -> None:
        self.window = window
        self.keys = keys
        # key -> [window start, first counted, last counted, count, the first row]
        self._open: dict[tuple[str, int, str], list[Any]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def applies(row: Mapping[str, Any]) -> bool:
        """A caller without a known token that was refused for it (401) or for its earlier
        failures (429)."""
        return row["user"] is None and row["status"] in (401, 429)

    def first(self, row: dict[str, Any]) -> bool:
        reason = str(row["detail"].get("error", ""))
        key = (row["client"] or "?", int(row["status"]), reason)
        now = float(row["t"])
        with self._lock:
            if key not in self._open and len(self._open) >= self.keys:
                key = ("*", key[1], key[2])
            tally = self._open.get(key)
            if tally is None:
                self._open[key] = [now, None, None, 0, row]
                return True
            tally[1] = now if tally[1] is None else tally[1]
            tally[2] = now
            tally[3] += 1
            return False

    def ended(self, now: float) -> list[dict[str, Any]]:
        with self._lock:
            done = [key for key, tally in self._open.items() if now >= tally[0] + self.window]
            closed = [(key, self._open.pop(key)) for key in done]
        return [row for key, tally in closed if (row := self._row(key, tally)) is not None]

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            closed, self._open = list(self._open.items()), {}
        return [row for key, tally in closed if (row := self._row(key, tally)) is not None]

    @staticmethod
    def _row(key: tuple[str, int, str], tally: list[Any]) -> dict[str, Any] | None:
        _, first, last, count, row = tally
        if not count:
            return None  # the window's one failure has its own row
        client, status, reason = key
        return {
            **row,
            "t": last,
            "client": client,
            "action": "auth_failures",
            "target": None,
            "status": status,
            "detail": {"error": reason, "count": count, "first": first, "last": last},
        }


class AuditWriter:
    """A thread that commits queued audit rows in groups (`GroupWorker`) and tells each waiter
    when its row is durable. `failures` tallies failed authentications (`FailureTally`)."""

    def __init__(self, store: Store, failures: FailureTally | None = None) -> None:
        self.store = store
        self.failures = failures if failures is not None else FailureTally()
        self._worker: GroupWorker[tuple[dict[str, Any], Callable[[], None]]] = GroupWorker(
            self._write, "caldera-audit"
        )

    def write(self, row: dict[str, Any], done: Callable[[], None]) -> None:
        self._worker.put((row, done))

    def close(self) -> None:
        for row in self.failures.drain():
            self._worker.put((row, _nothing))
        self._worker.close()

    def _write(self, group: list[tuple[dict[str, Any], Callable[[], None]]]) -> None:
        try:
            with self.store.batch() as writes:
                writes.audit([row for row, _ in group])
        except Exception:  # the database is away: say so, never hold the answer back
            log.exception("could not write %d audit row(s)", len(group))
        for _, done in group:
            done()


def _nothing() -> None:
    """Nobody waits for a tally row."""


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


def _detail(
    action: str, status: int, request: Any, response: Any
) -> tuple[dict[str, Any], str | None]:
    """The row's details and, for an accepted submission, its target (the new job's id), from
    the request and response bodies as JSON (None when they were not JSON)."""
    detail: dict[str, Any] = {}
    target = None
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
            for key, field in _ACCEPTED_FIELDS:
                if isinstance(response.get(field), str | int | float):
                    detail[key] = response[field]
    return detail, target


@dataclass
class AuditEntry:
    """One state-changing request as the middleware saw it arrive. The middleware leaves it in
    the ASGI scope (`audit_entry(scope)`); a route that commits the change itself asks it for
    the row (`accepted`) and writes that in the same transaction, and the middleware then
    writes no second row for it."""

    began: float
    user: str | None
    client: str | None
    method: str
    path: str
    action: str
    target: str | None
    body: bytearray  # the request body as far as it was read (at most _CAPTURE bytes)
    written: int | None = None  # the status of the row the route committed, if it did

    def row(self, status: int, request: Any, response: Any) -> dict[str, Any]:
        detail, target = _detail(self.action, status, request, response)
        target = target if target is not None else self.target
        return {
            "t": self.began,
            "user": self.user,
            "client": self.client,
            "method": self.method,
            "path": self.path,
            "action": self.action,
            "target": clean_text(target, 255) if target is not None else None,
            "status": status,
            "detail": detail,
        }

    def accepted(self, status: int, answer: Mapping[str, Any]) -> dict[str, Any]:
        """The row for a request the route is about to commit with `status` and `answer` (the
        response's fields: the new job's `id`, `type`, `tasks`, `gpus_per_task`). The route
        must insert it in the transaction that commits the change, then set `written`."""
        return self.row(status, _json(bytes(self.body)) if self.body else None, answer)


def audit_entry(scope: Mapping[str, Any]) -> AuditEntry | None:
    """The request's audit entry (None: no AuditLog around this app, or a read)."""
    entry = scope.get(_SCOPE_KEY)
    return entry if isinstance(entry, AuditEntry) else None


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
        method = scope["method"]
        path = scope.get("path", "")
        action, target = _action(method, [p for p in path.split("/") if p])
        client = scope.get("client")
        body = bytearray()
        entry = AuditEntry(
            began=self.clock(),
            user=self._user(scope),
            client=clean_text(client[0], 64) if client else None,
            method=clean_text(method, 8),
            path=clean_text(path, 512),
            action=clean_text(action, 32),
            target=target,
            body=body,
        )
        scope[_SCOPE_KEY] = entry

        async def receive_and_keep() -> Any:
            message = await receive()
            if message["type"] == "http.request" and len(body) < _CAPTURE:
                body.extend(message.get("body", b"")[: _CAPTURE - len(body)])
            return message

        held: list[Any] = []
        answer = bytearray()
        status = 500
        started = False

        async def send_after_audit(message: Any) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = int(message["status"])
                if entry.written == status:  # committed with the change: nothing to wait for
                    await send(message)
                    return
                held.append(message)
                return
            if message["type"] == "http.response.body" and held:
                if len(answer) < _CAPTURE:
                    answer.extend(message.get("body", b"")[: _CAPTURE - len(answer)])
                held.append(message)
                if message.get("more_body", False) and len(answer) < _CAPTURE:
                    return
                await self._record(entry, status, bytes(body), bytes(answer))
                pending, held[:] = list(held), []
                for part in pending:
                    await send(part)
                return
            await send(message)

        try:
            await self.app(scope, receive_and_keep, send_after_audit)
        except Exception:
            if not started:  # it failed before answering: the server's 500 goes around us
                await self._record(entry, 500, bytes(body), b"")
            raise
        finally:
            if held:  # the app ended without finishing its answer
                await self._record(entry, status, bytes(body), bytes(answer))
                for part in held:
                    await send(part)

    async def _record(self, entry: AuditEntry, status: int, body: bytes, answer: bytes) -> None:
        row = entry.row(status, _json(body) if body else None, _json(answer) if answer else None)
        tally = self.writer.failures
        for ended in tally.ended(row["t"]):
            self.writer.write(ended, _nothing)
        if tally.applies(row) and not tally.first(row):
            return  # counted: its window's row says how many
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def committed() -> None:
            loop.call_soon_threadsafe(settle)

        self.writer.write(row, committed)
        await done
