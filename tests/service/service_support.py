"""Helpers for the end-to-end tests. Real servers: `caldera serve --gpus 8` as a subprocess
on a free 127.0.0.1 port, against SQLite (a fresh data dir) or PostgreSQL (a fresh schema on
the session's private server, see `postgres.py`), driven through the `caldera` CLI like a new user
would.

Tasks outlive their server by design, so teardown asks every runner the data dir's records
name to kill its task (after checking it is still that process), and kills the task cgroups.

Run as root (CI), a server never runs jobs as root: unless a test's config says otherwise its
jobs run as `nobody` (`SANDBOX`), and its data dir is a folder under /tmp every account can
pass through (pytest's own temp folders are private to root).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from caldera.ports import free_port
from caldera.sdk import Client
from caldera.service.launcher import kill_recorded_tasks
from polling import wait_for

CALDERA = str(Path(sys.executable).parent / "caldera")
TRAINER = str(Path(__file__).with_name("trainer.py"))

ALICE = "alice-token-0001"
BOB = "bob-token-00002"
OPS = "ops-token-00003"
ROOT = os.geteuid() == 0
SANDBOX = "nobody"  # the account test jobs run as under a root server, unless told otherwise


def _reachable_by_others(path: str) -> bool:
    """Can an account other than root execute `path` (every folder on the way searchable)?"""
    real = Path(os.path.realpath(path))
    folders_ok = all(folder.stat().st_mode & 0o001 for folder in real.parents)
    return folders_ok and bool(real.stat().st_mode & 0o001)


# The Python test jobs run with: under a root server they run as another account, which may
# not reach this interpreter (pyenv under /root is private); Debian's python3 then, which
# finds caldera.sdk (standard library only) through the checkout (see trainer.py).
JOB_PYTHON = (
    sys.executable if not ROOT or _reachable_by_others(sys.executable) else "/usr/bin/python3"
)

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
    data: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        if self.data is None:
            self.data = reachable_dir("caldera-data-") if ROOT else self.root / "data"
        return self.data

    def start(self) -> Server:
        config_file = write_config(self.root / "caldera.yaml", self.config)
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

        # A loaded machine (10 processes on 2 cores) takes a while to start Python.
        wait_for("the server to answer /healthz", healthy, timeout=60)
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
        # A wide terminal: tables print whole values, not cut to 80 columns.
        env = {**os.environ, "CALDERA_URL": self.url, "COLUMNS": "200"}
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
        """Stop every task a runner record names (its runner kills the whole task)."""
        kill_recorded_tasks(self.data_dir)


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """Write a server config the way a root server accepts it: mode 600 (it holds the
    tokens) and, unless it says otherwise, jobs run as `SANDBOX`."""
    config = dict(config)
    if ROOT and "isolation" not in config:
        config["isolation"] = {"sandbox_user": SANDBOX}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def reachable_dir(prefix: str) -> Path:
    """A fresh folder under /tmp that every account may pass through (0711), removed when the
    test session ends."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    atexit.register(shutil.rmtree, path, True)
    return path


def job_log(server: Server, job_id: str) -> str:
    return server.client(OPS).logs(job_id)


def job_state(server: Server, job_id: str) -> str:
    return str(server.client(OPS).get(job_id)["state"])


def trainer(*args: object) -> list[str]:
    return [JOB_PYTHON, TRAINER, *(str(a) for a in args)]


def job_processes(job_id: str) -> list[int]:
    """Every live process on this host whose environment names `job_id` (caldera sets
    CALDERA_JOB_ID in every task; root may read any process's environment)."""
    marker = f"CALDERA_JOB_ID={job_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found
