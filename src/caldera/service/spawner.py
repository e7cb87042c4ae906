"""Spawning tasks off the scheduling loop, fairly.

Starting a process takes tens of milliseconds (a fork, a Python runner). A job of hundreds of
tasks spawned inline would hold the loop for minutes: no exits seen, no deadlines kept, no
other start. `Spawner` runs the spawns in a thread of its own and takes one task of each
waiting job in turn, so a one-task job started behind a 400-task one is spawned next, not
400 spawns later. What it is given is committed already; what it has not spawned when the
server stops is found never spawned by the next server (requeued, no work charged).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Spawner"]

log = logging.getLogger("caldera.service")

J = TypeVar("J")
T = TypeVar("T")


class Spawner(Generic[J, T]):
    """`spawn(job, task)` for each task given, in a thread, round robin over jobs. `key(job)`
    names a job."""

    def __init__(self, spawn: Callable[[J, T], None], key: Callable[[J], str]) -> None:
        self._spawn = spawn
        self._key = key
        self._waiting: OrderedDict[str, deque[tuple[J, T]]] = OrderedDict()
        self._ready = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="caldera-spawn", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify()
        self._thread.join(timeout=timeout)

    def put(self, job: J, task: T) -> None:
        with self._ready:
            self._waiting.setdefault(self._key(job), deque()).append((job, task))
            self._ready.notify()

    def _next(self) -> tuple[J, T] | None:
        with self._ready:
            while not self._waiting and not self._stopped:
                self._ready.wait()
            if self._stopped:
                return None
            key, tasks = next(iter(self._waiting.items()))
            item = tasks.popleft()
            if tasks:
                self._waiting.move_to_end(key)  # its next task after the other jobs'
            else:
                del self._waiting[key]
            return item

    def _run(self) -> None:
        while (item := self._next()) is not None:
            try:
                self._spawn(*item)
            except Exception:  # the spawner must outlive one bad spawn; the log says why
                log.exception("spawning a task failed")
