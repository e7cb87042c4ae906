"""Who is looking at the dashboard: the same bearer tokens as the API, kept in a cookie.

A browser cannot send `Authorization: Bearer` on a plain page load, so /ui/login takes the
token once and stores it in an HttpOnly, SameSite=Strict cookie scoped to /ui: scripts cannot
read it and other sites cannot make the browser send it. The dashboard only reads; it has no
route that changes anything but the login itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse, Response

from caldera.service.ui.reads import Viewer

__all__ = [
    "COOKIE",
    "LoginRequired",
    "Looker",
    "login_redirect",
    "require_viewer",
    "set_login",
    "viewer_of",
]

COOKIE = "caldera_token"
_DAY = 86_400


class LoginRequired(Exception):
    """No valid token in the cookie: the page answers with a redirect to /ui/login."""


def _tokens(request: Request) -> Mapping[str, Any]:
    tokens: Mapping[str, Any] = request.app.state.tokens
    return tokens


def viewer_of(request: Request, token: str | None = None) -> Viewer | None:
    """The viewer a token (default: the cookie's) stands for; None if unknown."""
    token = token if token is not None else request.cookies.get(COOKIE)
    if not token:
        return None
    who = _tokens(request).get(token)
    if who is None:
        return None
    return Viewer(user=str(who.user), queues=frozenset(who.queues), admin=bool(who.admin))


def login_redirect(request: Request) -> Response:
    """To the login page, coming back here after. htmx follows `HX-Redirect` itself."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.headers.get("hx-request"):
        target = request.headers.get("hx-current-url", "/ui")
        response = Response(status_code=204)
        response.headers["HX-Redirect"] = "/ui/login?next=" + quote(target, safe="")
        return response
    return RedirectResponse("/ui/login?next=" + quote(target, safe=""), status_code=303)


def set_login(response: Response, request: Request, token: str | None) -> None:
    if token is None:
        response.delete_cookie(COOKIE, path="/ui")
        return
    response.set_cookie(
        COOKIE,
        token,
        max_age=7 * _DAY,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def require_viewer(request: Request) -> Viewer:
    """The page's viewer; raises LoginRequired (answered by `login_redirect`) without one."""
    viewer = viewer_of(request)
    if viewer is None:
        raise LoginRequired
    return viewer


Looker = Annotated[Viewer, Depends(require_viewer)]
"""A dashboard page's viewer, logged in."""
