"""Helpers for the end-to-end tests. Real servers: `caldera serve --gpus 8` as a subprocess
on a free 127.0.0.1 port, against SQLite (a fresh data dir) or PostgreSQL (a fresh schema on
the session's private server, see `postgres.py`), driven through the `caldera` CLI like a new user
would.

Tasks outlive their server by design, so teardown kills every task process group the data
dir's runner records name (after checking it is still that process).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from caldera.sdk import Client
from caldera.service.procs import signal_group
from polling import wait_for

CALDERA = str(Path(sys.executable).parent / "caldera")
TRAINER = str(Path(__file__).with_name("trainer.py"))

ALICE = "alice-token-0001"
BOB = "bob-token-00002"
OPS = "ops-token-00003"

BASE_CONFIG: dict[str, Any] = {
    "queues": [
        {"name": "team-a", "weight": 1, "reclaimable": True},
        {"name": "team-b", "weight": 1, "reclaimable": True},
        {"name": "ops", "weight": 1, "reclaimable": False},
    ],
    "tokens": [
        {"token": ALICE, "user": "alice", "queues": ["team-a"]},
        {"token": BOB, "user": "bob", "queues": ["team-a", "team-b"]},
        {"token": OPS, "user": "ops", "queues": ["*"], "critical": True, "admin": True},
    ],
    "policy": {"grace_period": 6, "throttle_timeout": 120},
    "poll_interval": 0.05,
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One `caldera serve` process; `restart()` keeps its data dir and database."""

    root: Path
    database_url: str | None
    config: dict[str, Any]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    clients: dict[str, Client] = field(default_factory=dict)
    gpu_args: tuple[str, ...] = ("--gpus", "8")  # or ("--fake-gpus", SHAPE) (test_gpus)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def start(self) -> Server:
        config_file = self.root / "caldera.yaml"
        config_file.write_text(yaml.safe_dump(self.config))
        argv = [
            CALDERA,
            "serve",
            "--config",
            str(config_file),
            "--data-dir",
            str(self.data_dir),
            *self.gpu_args,
            "--port",
            str(self.port),
        ]
        if self.database_url:
            argv += ["--database-url", self.database_url]
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server owns it
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the server to answer /healthz", healthy, timeout=30)
        return self

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self) -> Server:
        self.port = free_port()
        return self.start()

    def client(self, token: str = ALICE) -> Client:
        """An SDK client for polling (cached; the URL changes on restart)."""
        key = f"{self.url} {token}"
        if key not in self.clients:
            self.clients[key] = Client(self.url, token)
        return self.clients[key]

    def close_clients(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()

    def cli(
        self, *args: str, token: str | None = ALICE, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CALDERA_URL": self.url}
        env.pop("CALDERA_TOKEN", None)
        if token is not None:
            env["CALDERA_TOKEN"] = token
        done = subprocess.run(
            [CALDERA, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if check and done.returncode != 0:
            pytest.fail(f"caldera {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def kill_tasks(self) -> None:
        for record in self.data_dir.glob("jobs/*/run/*.runner"):
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            signal_group(data.get("pid"), data.get("start_ticks"), signal.SIGKILL)


def job_log(server: Server, job_id: str) -> str:
    return server.client(OPS).logs(job_id)


def job_state(server: Server, job_id: str) -> str:
    return str(server.client(OPS).get(job_id)["state"])


def trainer(*args: object) -> list[str]:
    return [sys.executable, TRAINER, *(str(a) for a in args)]
