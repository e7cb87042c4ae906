"""The dev cluster's processes from outside: free ports to give them, whether a pid is still
one of them (not a reused pid), and stopping them in waves (clients, then the API server,
then etcd) — for `stop()` and for `caldera k8s dev-cluster stop`, which attaches to a cluster
another process started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

from caldera.devcluster.bins import COMPONENTS

__all__ = ["alive", "free_ports", "serves_tls", "terminate"]


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (all held open together, so they differ)."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def serves_tls(port: int, ca_file: Path) -> bool:
    """Whether a TLS server on 127.0.0.1:`port` completes a handshake with a certificate the
    CA in `ca_file` signed for 127.0.0.1 (what the API server will check)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def alive(pid: int, bins: str, extra: Sequence[str] = ()) -> bool:
    """Whether `pid` is still one of this cluster's processes (not a reused pid): its
    executable is one of the binaries in `bins`, or one of `extra` (links resolved)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    if not bins:
        return False
    if any(exe == os.path.realpath(path) for path in extra):
        return True
    return any(exe == os.path.realpath(Path(bins) / name) for name in COMPONENTS)


_STOP_WAVES = (
    (
        "kwok",
        "kube-scheduler",
        "kube-controller-manager",
        "vc-scheduler",
        "vc-controller-manager",
        "vc-webhook-manager",
    ),
    ("kube-apiserver",),
    ("etcd",),
)


def terminate(
    pids: dict[str, int], bins: str, extra: Sequence[str] = (), grace: float = 10.0
) -> None:
    """Stop the clients first, then the API server, then etcd (so none of them spends its
    shutdown retrying a store that is already gone): SIGTERM each wave, SIGKILL what is left
    of it after `grace` seconds."""
    for wave in _STOP_WAVES:
        live = [pids[name] for name in wave if name in pids and alive(pids[name], bins, extra)]
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            live = [pid for pid in live if not _reaped(pid) and alive(pid, bins, extra)]
            if live:
                time.sleep(0.05)
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in live:
            _reaped(pid)


def _reaped(pid: int) -> bool:
    """Reap `pid` if it is our exited child; True when it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not Path(f"/proc/{pid}").exists()
    return done == pid
