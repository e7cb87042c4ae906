"""Callers without a known token are bounded per client address (docs/service.md "Security
model").

`StrangerLimit` is ASGI middleware inside the audit log. A request carrying a known token
(the `Authorization: Bearer` header, or the dashboard's cookie) passes untouched: users are
bounded by their own limits (`caldera.service.limits`). Any other request passes too, but
each 401 it earns takes a token from its client address's bucket (`limits.auth_failure_rate`
a second, bursts of `limits.auth_failure_burst`); once the bucket is empty the address gets
429 with `Retry-After` before any route runs. A stranger reading /healthz or the login page
never empties it; a token-guessing flood does after its burst, and then costs the server a
dict lookup per request. What the audit log keeps of such a flood is bounded too
(`caldera.service.audit.FailureTally`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from caldera.service.limits import RateLimiter
from caldera.service.ui.auth import COOKIE

__all__ = ["TOO_MANY", "StrangerLimit", "known_token"]

TOO_MANY = "too many failed authentications from this address"
_COOKIE = f"{COOKIE}=".encode()  # the dashboard's login


def known_token(scope: Mapping[str, Any], tokens: Mapping[str, Any]) -> bool:
    """Does the request carry a token the configuration grants?"""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip() in tokens:
                return True
        elif name == b"cookie":
            for part in value.split(b";"):
                part = part.strip()
                if part.startswith(_COOKIE) and part[len(_COOKIE) :].decode("latin-1") in tokens:
                    return True
    return False


class StrangerLimit:
    """ASGI middleware: failed authentications per client address, then 429."""

    def __init__(
        self,
        app: Any,
        tokens: Mapping[str, Any],
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.failures = RateLimiter(rate, burst, clock)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or known_token(scope, self.tokens):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = str(client[0]) if client else "?"
        wait = self.failures.wait(address)
        if wait > 0:
            await _refuse(send, RateLimiter.retry_after(wait))
            return

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.failures.take(address)
            await send(message)

        await self.app(scope, receive, counted)


async def _refuse(send: Any, retry_after: str) -> None:
    body = json.dumps({"detail": TOO_MANY}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", retry_after.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
