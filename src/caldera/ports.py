"""A free TCP port on 127.0.0.1 for a server this process is about to start (a benchmark's
service or PostgreSQL, a task's rendezvous). The port is released before it is returned, so
another process may take it first; the callers start their server at once."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
