"""Requests refused before any route sees them: a body over `limits.body_bytes` (413, read no
further than the limit, chunked bodies included) and a URL holding a control character such
as NUL (400: PostgreSQL refuses NUL in text, terminals interpret escapes)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_to_bytes

__all__ = ["RequestGuard", "read_body", "replay_body"]


def _control(data: bytes) -> bool:
    return any(b < 0x20 or b == 0x7F for b in data)


class RequestGuard:
    """ASGI middleware enforcing the body limit and clean URLs."""

    def __init__(self, app: Any, body_bytes: int) -> None:
        self.app = app
        self.body_bytes = body_bytes

    async def _refuse(self, send: Any, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("raw_path") or scope.get("path", "").encode()
        if _control(unquote_to_bytes(path)) or _control(
            unquote_to_bytes(scope.get("query_string", b""))
        ):
            await self._refuse(send, 400, "the URL holds a control character")
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._refuse(send, 400, "invalid Content-Length")
                    return
                if declared > self.body_bytes:
                    await self._refuse(send, 413, self._too_large())
                    return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        # Read the body here, never more than the limit, then hand it on (a body the client
        # cut short goes on as it is: the route answers a client that is gone).
        read = await read_body(receive, self.body_bytes)
        if read is None:
            await self._refuse(send, 413, self._too_large())
            return
        await self.app(scope, replay_body(read[0], False, receive), send)

    def _too_large(self) -> str:
        return f"the request body is larger than {self.body_bytes} bytes (limits.body_bytes)"


async def read_body(receive: Any, limit: int | None = None) -> tuple[bytes, bool] | None:
    """A request's whole body, and whether it ended because the client went away (the
    message that said so is then consumed); None once it passes `limit` bytes, read no
    further."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


def replay_body(body: bytes, cut_short: bool, receive: Any) -> Any:
    """A `receive` that gives the body already read, once, then what the client sends next
    (after a body cut short: the disconnect again) — for middleware that reads a request's
    body before handing the request on."""
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": cut_short}
        if cut_short:
            return {"type": "http.disconnect"}
        return await receive()

    return replay
