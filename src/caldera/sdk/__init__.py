"""caldera's Python SDK: `Client` for the service's REST API, and `caldera.sdk.preemption`
for training code that should checkpoint when it is asked to give way.

`Client` is imported lazily so that training code importing only `preemption` does not pay
for the HTTP client at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from caldera.sdk.client import ApiError, CalderaError, Client

__all__ = ["ApiError", "CalderaError", "Client"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from caldera.sdk import client

        return getattr(client, name)
    raise AttributeError(f"module 'caldera.sdk' has no attribute {name!r}")
