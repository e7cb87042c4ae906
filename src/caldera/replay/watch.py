"""One pod watch on the replay's namespace, run on its own thread.

Events go to the replay's main thread through a queue, each with the moment it arrived on the
replay's clock: that moment, not the API server's whole-second timestamps, is what the replay
measures. Apart from what the events mean (caldera.replay.pods) because this part is about
keeping a watch open against an API server that may be busy or restarting.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from caldera.replay.api import NAMESPACE

__all__ = ["Event", "watch_pods"]

Event = tuple[str, float, Any]
"""(kind, arrived, payload): a watch event type (`ADDED`, `MODIFIED`, `DELETED`) with its pod,
`LIST` with every pod after a (re)list, or `NOTE` with what went wrong."""


def watch_pods(
    core: Any, events: queue.Queue[Event], stop: threading.Event, now: Callable[[], float]
) -> None:
    """Watch the namespace's pods until `stop` is set. A watch that ends or fails is reopened
    from the last resourceVersion, a 410 Gone re-lists."""
    version = ""
    while not stop.is_set():
        try:
            if not version:
                listed = core.list_namespaced_pod(NAMESPACE, _preload_content=False)
                data = json.loads(listed.data)
                version = data["metadata"]["resourceVersion"]
                events.put(("LIST", now(), data["items"]))
            response = core.list_namespaced_pod(
                NAMESPACE,
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=20,
                _preload_content=False,
            )
            buffer = b""
            for chunk in response.stream(amt=None):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    arrived = now()
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = ""  # 410 Gone or worse: list again
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        events.put((event["type"], arrived, obj))
                if stop.is_set() or not version:
                    break
            response.release_conn()
        except Exception as error:  # the API server is busy or restarting: try again
            if stop.is_set():
                return
            events.put(("NOTE", now(), f"watch: {error.__class__.__name__}"))
            version = ""
            time.sleep(0.5)
