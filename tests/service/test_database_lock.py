"""One active server per database (issue 15 item 6): the lock lives in the database itself
(PostgreSQL advisory lock, SQLite file lock), so a second server refuses to start even with
another data dir, with one line, and may start once the first has stopped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from service_support import CALDERA, free_port, reachable_dir, write_config

from caldera.service.server import ServiceError, build_service

CONFIG = {
    "queues": [{"name": "team-a", "weight": 1}],
    "tokens": [{"token": "alice-token-1", "user": "alice", "queues": ["team-a"]}],
}


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_a_second_server_on_the_same_database_refuses_to_start(
    shared_url: str, service_config: Path
) -> None:
    tmp_path = reachable_dir("caldera-lock-")  # data dirs jobs could reach, as root needs
    first = build_service(service_config, tmp_path / "one", gpus=2, database_url=shared_url)
    try:
        with pytest.raises(ServiceError) as error:
            build_service(service_config, tmp_path / "two", gpus=2, database_url=shared_url)
        message = str(error.value)
        assert message.startswith("another caldera server is using the database")
        assert "\n" not in message
        done = subprocess.run(
            [CALDERA, "serve", "--config", str(service_config), "--data-dir",
             str(tmp_path / "three"), "--gpus", "2", "--port", str(free_port()),
             "--database-url", shared_url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1, done.stderr
        assert "another caldera server is using the database" in done.stderr
    finally:
        first.close()
    again = build_service(service_config, tmp_path / "two", gpus=2, database_url=shared_url)
    again.close()


@pytest.fixture
def service_config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "caldera.yaml", CONFIG)
