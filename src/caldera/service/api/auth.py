"""Who is calling: `Authorization: Bearer TOKEN` → the `Principal` the configuration grants.

Every route but /healthz and /metrics depends on `Caller`; 401 without a known token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from caldera.config import Principal

__all__ = ["Caller", "principal"]

_bearer = HTTPBearer(auto_error=False)


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Who the bearer token says the caller is; 401 without a known token. A dict lookup:
    `async` so that FastAPI runs it on the event loop, not through a worker thread."""
    if credentials is None:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    who: Principal | None = request.app.state.tokens.get(credentials.credentials)
    if who is None:
        raise HTTPException(401, "invalid token", headers={"WWW-Authenticate": "Bearer"})
    return who


Caller = Annotated[Principal, Depends(principal)]
