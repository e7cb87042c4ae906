"""`POST /v1/jobs` for a well-formed request, without FastAPI's routing and dependencies.

Why: submission is the hot request (issue 12 item 5: 200/s), and on its way to the route
function FastAPI matches it against every route, solves the `Caller` dependency through
`HTTPBearer`, validates the body through a TypeAdapter and opens two exit stacks: about half
of the app's CPU per submission (1.0–1.2 → 0.6 ms in process without the commit; the server's
event loop 1.4 → 1.1 ms), on the same two cores as the database and the intake thread.

`SubmitRoute` is ASGI middleware, innermost of the app's own (inside the request guard, the
audit log and Server-Timing, so those see every submission as before). It answers a request
only when everything FastAPI would check first is already fine: a known bearer token, a JSON
content type, a body that parses as JSON and validates as `JobRequest`. It then calls the
route's own function (`jobs.submit`: the same checks, admission and answers) and renders an
HTTPException with the app's own handler. Any other request — and any submission FastAPI
would refuse before its route (401, the 400 of an invalid body) — goes on to FastAPI
untouched, its body replayed, so every refusal is FastAPI's own. The FastAPI route stays the
one OpenAPI describes; `tests/service/test_submit_route.py` sends the same requests both ways
and compares the answers.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError
from starlette.requests import Request

from caldera.config import Principal
from caldera.service.api import jobs
from caldera.service.api.guard import read_body, replay_body
from caldera.service.api.schemas import JobRequest

__all__ = ["SubmitRoute"]

_PATH = "/v1/jobs"


def _bearer(scope: dict[str, Any]) -> str | None:
    """The bearer token, as `HTTPBearer` reads it (scheme case-insensitive)."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token if scheme.lower() == "bearer" and token else None
    return None


def _json_content(scope: dict[str, Any]) -> bool:
    """Content-Type `application/json` (parameters allowed), which FastAPI also parses."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return bool(kind == b"application/json")
    return False


class SubmitRoute:
    """ASGI middleware: well-formed submissions straight to `jobs.submit`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] != _PATH
            or scope.get("root_path")  # mounted under a prefix: FastAPI's routing decides
        ):
            await self.app(scope, receive, send)
            return
        read = await read_body(receive)  # the request guard has bounded it
        assert read is not None  # no limit: never refused
        body, cut_short = read
        replay = replay_body(body, cut_short, receive)
        tokens = scope["app"].state.tokens
        token = _bearer(scope)
        who: Principal | None = tokens.get(token) if token is not None else None
        whole = who is not None and not cut_short and _json_content(scope)
        job = _job_request(body) if whole else None
        if job is None or who is None:
            await self.app(scope, replay, send)  # FastAPI answers, refusals included
            return
        request = Request(scope, replay)
        try:
            response = await jobs.submit(job, who, request)
        except HTTPException as error:
            response = await _handler(scope["app"], error)(request, error)
        await response(scope, replay, send)


def _handler(app: Any, error: Exception) -> Any:
    """The app's handler for `error`, looked up along its classes as Starlette does (FastAPI
    registers its own for Starlette's HTTPException, the base of FastAPI's)."""
    for kind in type(error).__mro__:
        if kind in app.exception_handlers:
            return app.exception_handlers[kind]
    raise error


def _job_request(body: bytes) -> JobRequest | None:
    """The body as FastAPI's route would get it, or None where FastAPI would refuse it."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        return JobRequest.model_validate(data)
    except ValidationError:
        return None
