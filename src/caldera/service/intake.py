"""Group commit: work that many API requests queue at once, done by one thread in one go.

`GroupWorker` is a thread that takes everything queued since it last looked and hands it to
its handler in one call. The service uses two: submissions (`Runtime.enqueue`: every waiting
submission is admitted and committed in one transaction, job rows, events and audit rows
together) and the audit rows of the other requests (`caldera.service.audit.AuditWriter`).
Under load a group holds many requests, so a commit (and on PostgreSQL its WAL flush and the
round trips of a transaction) is paid once per group instead of once per request, and the
thread hand-overs are paid once per group too; alone, a request is a group of one.

`Submission` is one queued submission and the future its caller waits on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from caldera.runtime.requests import RequestRecord

__all__ = ["GroupWorker", "Submission"]

log = logging.getLogger("caldera.service")

T = TypeVar("T")


@dataclass
class Submission:
    """A request waiting to be admitted and committed (given as its record, or as the
    record's wire form: `RequestRecord.from_wire`).

    `admit()`: the per-user limits (raises LimitError), asked when its group is taken;
    `audit(row)`: the audit row to commit with the job's row. `future` is given the job's row,
    or the exception that refused or failed it."""

    request: RequestRecord
    user: str
    admit: Callable[[], None] | None = None
    audit: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    future: Future[dict[str, Any]] = field(default_factory=Future)

    def __post_init__(self) -> None:
        if isinstance(self.request, Mapping):  # the wire form (a stored or scripted request)
            self.request = RequestRecord.from_wire(self.request)


class GroupWorker(Generic[T]):
    """A thread handing everything queued to `handle` in one call. `handle` must not raise
    (an exception is logged and the group dropped); it tells the waiters itself."""

    def __init__(self, handle: Callable[[list[T]], None], name: str) -> None:
        self._handle = handle
        self._queue: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, item: T) -> None:
        self._queue.put(item)

    def close(self, timeout: float = 10.0) -> None:
        """Do what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            stop = False
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                group.append(more)
            try:
                self._handle(group)
            except Exception:  # the thread must outlive one bad group; the log says why
                log.exception("%s: a group of %d failed", self._thread.name, len(group))
            if stop:
                return
