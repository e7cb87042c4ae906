"""Fixtures for the end-to-end tests: a database per test (SQLite, or a fresh PostgreSQL
schema, skipped with the reason when PostgreSQL is unreachable) and a server factory."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from service_support import BASE_CONFIG, PG_ADMIN, Server


def _postgres_schema() -> Iterator[str]:
    try:
        import psycopg

        admin = psycopg.connect(PG_ADMIN, autocommit=True)
    except Exception as error:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 (database test) is unreachable: {error}")
    schema = "caldera_" + secrets.token_hex(4)
    admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield (
            f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
        )
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        yield from _postgres_schema()


@pytest.fixture
def make_server(tmp_path: Path, database_url: str | None) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def make(**policy: Any) -> Server:
        config = json.loads(json.dumps(BASE_CONFIG))
        config["policy"].update(policy)
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
