"""How a replay talks to its API server: the namespace it works in, calls retried while the
server is busy, and the server's timestamps.

A fresh dev cluster answers 429 while its storage initializes and 5xx while it settles; every
part of the replay (setting up, submitting, following pods) retries the same way, so the rule
lives here once.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

__all__ = ["NAMESPACE", "list_volcano_queues", "parse_time", "retrying", "rfc3339"]

NAMESPACE = "replay"
"""Where a replay creates its jobs (and caldera's controller keeps its state)."""


def retrying(call: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """`call()`, again while the API server answers 429 (storage initializing, API priority
    and fairness) or 5xx, up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except Exception as error:
            status = getattr(error, "status", None)
            if not (status == 429 or (isinstance(status, int) and status >= 500)):
                raise
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"replay: {what}: the API server kept answering {status}"
                ) from None
            time.sleep(0.5)


def rfc3339(unix: float) -> str:
    """A Unix time as the API server writes times (what KWOK's stages read)."""
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    """An API server timestamp as Unix time; None when there is none."""
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def list_volcano_queues(custom: Any) -> list[dict[str, Any]]:
    """Volcano's Queues as the API server lists them (caldera's controller creates them too)."""
    listed = retrying(
        lambda: custom.list_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues"),
        "listing queues",
    )
    items: list[dict[str, Any]] = listed["items"]
    return items
