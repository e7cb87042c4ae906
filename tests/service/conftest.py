"""Fixtures for the end-to-end tests: a database per test (SQLite, or a fresh schema on the
session's private PostgreSQL server) and a server factory."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from service_support import BASE_CONFIG, ROOT, Server

from caldera.bench.postgres import PostgresServer, find_binaries, start_postgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the session (Debian's binaries, a temp dir, a free
    port on 127.0.0.1). Without the binaries the tests skip, except under CI=true."""
    bin_dir = find_binaries()
    if bin_dir is None:
        reason = "PostgreSQL binaries not found in /usr/lib/postgresql/*/bin (make system-deps)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        server = start_postgres(bin_dir)
    except RuntimeError as error:
        pytest.fail(str(error))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> Iterator[str]:
    """A SQLAlchemy URL to a fresh schema of the private server, dropped afterwards."""
    import psycopg

    schema = "caldera_" + secrets.token_hex(4)
    with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield postgres.url(options=f"-csearch_path%3D{schema}")
    finally:
        with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def make_server(tmp_path: Path, database_url: str | None) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def make(config_changes: dict[str, Any] | None = None, **policy: Any) -> Server:
        config = json.loads(json.dumps(BASE_CONFIG))
        config["policy"].update(policy)
        config.update(config_changes or {})
        root = tmp_path / f"server{len(servers)}"
        root.mkdir()
        server = Server(root, database_url, config)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.stop()
        server.kill_tasks()
        server.close_clients()


@pytest.fixture(scope="session")
def job_accounts() -> Iterator[dict[str, str]]:
    """Throwaway OS accounts for alice's and bob's jobs (useradd; removed at the end).
    Dropping privileges needs root: skipped when not root (CI runs as root)."""
    if not ROOT:
        if os.environ.get("CI") == "true":
            pytest.fail("the isolation tests need root (CI runs as root)")
        pytest.skip("needs root: only root can create accounts and run jobs as them")
    suffix = secrets.token_hex(3)
    accounts = {"alice": f"cld{suffix}a", "bob": f"cld{suffix}b"}
    made = []
    try:
        for name in accounts.values():
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", name],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            made.append(name)
        yield accounts
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True, timeout=60, check=False)
