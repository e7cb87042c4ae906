"""The operator's and users' dashboard at /ui, served by `caldera serve` itself.

Server-rendered Jinja2 templates and htmx (one vendored file, installed from the npm registry
at build time by scripts/ui-assets.sh): every page works without a build step or a CDN, and
its live region is re-fetched every two seconds, so nothing reloads and nothing is guessed in
the browser — what it shows is what the service's store, runtime and last cycle say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from caldera.service.ui.auth import LoginRequired, login_redirect
from caldera.service.ui.pages import router

__all__ = ["STATIC", "mount_ui"]

STATIC = Path(__file__).parent / "static"


def mount_ui(app: FastAPI, runtime: Any, registry: Any) -> None:
    """Serve the dashboard at /ui over `runtime`; `registry` holds the Prometheus metrics."""
    app.state.runtime = runtime
    app.state.metrics_registry = registry
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
    app.include_router(router)
    app.add_exception_handler(LoginRequired, _to_login)


async def _to_login(request: Request, _error: Exception) -> Response:
    return login_redirect(request)
