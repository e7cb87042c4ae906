"""The FastAPI application: routers, the error format and the timing header."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from caldera.service.api import cluster, jobs, logs
from caldera.service.api.guard import RequestGuard
from caldera.service.api.submit_route import SubmitRoute
from caldera.service.limits import Admission, Limits
from caldera.service.metrics import CONTENT_TYPE
from caldera.service.views import ServiceRuntime

__all__ = ["API_VERSION", "ServerTiming", "create_app"]

API_VERSION = "v1"


class ServerTiming:
    """Adds `Server-Timing: app;dur=MS` to every response: the time spent inside the server,
    so a client can tell its own queueing from the service's (used by `caldera bench api`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()

        async def timed(message: Any) -> None:
            if message["type"] == "http.response.start":
                elapsed = (time.perf_counter() - began) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={elapsed:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed)


async def _invalid(_request: Request, error: Exception) -> JSONResponse:
    """A request pydantic refused: 400 with the first problem on one line."""
    assert isinstance(error, RequestValidationError)
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query"))
    message = first.get("msg", "invalid request")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    return JSONResponse({"detail": f"{where}: {message}" if where else message}, 400)


def create_app(
    runtime: ServiceRuntime,
    render_metrics: Callable[[], bytes],
    lifespan: Any = None,
    limits: Limits | None = None,
) -> FastAPI:
    """The API over one runtime. `render_metrics()` returns the Prometheus text; `limits`:
    the admission limits (the defaults without)."""
    limits = limits if limits is not None else Limits()
    app = FastAPI(
        title="caldera",
        lifespan=lifespan,
        version=API_VERSION,
        description="caldera's local service: submit and watch GPU jobs scheduled by the same "
        "decision core as the simulator. Authenticate with `Authorization: Bearer TOKEN`.",
    )
    app.state.runtime = runtime
    app.state.tokens = runtime.tokens
    app.state.limits = limits
    app.state.admission = Admission(limits, runtime.store.count_waiting)
    app.state.isolation = None  # `caldera serve` sets its Isolation: workdirs are checked
    app.add_middleware(SubmitRoute)  # innermost: well-formed submissions skip FastAPI's routing
    app.add_middleware(RequestGuard, body_bytes=limits.body_bytes)
    app.add_middleware(ServerTiming)  # outermost
    app.add_exception_handler(RequestValidationError, _invalid)

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(render_metrics(), media_type=CONTENT_TYPE)

    prefix = f"/{API_VERSION}"
    app.include_router(cluster.router, prefix=prefix)
    app.include_router(jobs.router, prefix=prefix)
    app.include_router(logs.router, prefix=prefix)
    return app
