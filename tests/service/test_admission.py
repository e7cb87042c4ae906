"""What the API refuses, and why (issue 15 items 1, 3, 5, 7): every malformed request is a 4xx
with one line, never a 500; protection labels need a permission; configured size limits, the
submission rate and the waiting jobs per user are enforced (429 with Retry-After); a body is
never read past its limit. On the API (uvicorn in a thread, one keep-alive connection) over a
runtime with an in-memory process seam."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from service_support import free_port
from test_runtime import CONFIG, Clock, FakeLauncher

from caldera.service.api import create_app
from caldera.service.config import parse_config
from caldera.service.gpus import local_node
from caldera.service.launcher import JobFiles
from caldera.service.limits import Limits
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for

ALICE = "alice-token-1"
PROTECTOR = "protector-token-1"
TOKENS = [
    *CONFIG["tokens"],
    {"token": ALICE, "user": "alice", "queues": ["team-a"]},
    {"token": PROTECTOR, "user": "carol", "queues": ["team-a"], "protect": True},
]


@contextmanager
def api(tmp_path: Path, **limits: Any) -> Iterator[tuple[httpx.Client, Runtime]]:
    """The API over a fresh runtime, served by uvicorn on a free port in a thread."""
    tmp_path.mkdir(exist_ok=True)
    store = Store(database_url_for(tmp_path))
    store.migrate()
    config = parse_config({**CONFIG, "tokens": TOKENS})
    node, _ = local_node(8)
    runtime = Runtime(config, store, tmp_path, (node,), FakeLauncher(), Clock())
    runtime.recover()
    app = create_app(runtime, lambda: b"", limits=Limits(**limits))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the API did not start"
        time.sleep(0.05)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        yield client, runtime
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    with api(tmp_path) as (http, _):
        yield http


def post(client: httpx.Client, token: str = ALICE, **fields: Any) -> Any:
    body = {"queue": "team-a", "command": ["true"], **fields}
    return client.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})


BAD = [
    ({"env": {"A=B": "x"}}, "env"),
    ({"env": {"": "x"}}, "env"),
    ({"env": {"1X": "x"}}, "env"),
    ({"env": {"A": "x\0y"}}, "NUL"),
    ({"command": ["sh", "-c", "echo \0"]}, "NUL"),
    ({"command": [""]}, "program name is empty"),
    ({"gpus": 1e308}, "gpus"),
    ({"cpu": 1e308}, "cpu"),
    ({"cpu": "1e308"}, "cpu"),
    ({"memory": "1e308Gi"}, "memory"),
    ({"memory": 10**30}, "memory"),
    ({"tasks": 10**30}, "tasks"),
    ({"min_available": 10**30}, "min_available"),
    ({"expected_duration": 1e308}, "expected_duration"),
    ({"checkpoint": {"interval": 1e308}}, "interval"),
    ({"name": "a\0b"}, "name"),
    ({"name": "\x1b[2Jgotcha"}, "control characters"),
    ({"name": "x" * 256}, "name"),
    ({"queue": "team-a\0"}, "queue"),
    ({"labels": {"k": "line\nbreak"}}, "control characters"),
    ({"workdir": "/tmp/\0"}, "NUL"),
    ({"gpu_model": ["H100\0"]}, "gpu_model"),
]


@pytest.mark.parametrize(("fields", "why"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_malformed_submissions_are_refused_with_one_line_never_a_500(
    client: httpx.Client, fields: dict[str, Any], why: str
) -> None:
    answer = post(client, **fields)
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert why in detail and "\n" not in detail
    assert post(client).status_code == 201  # the same connection still works


def test_infinity_is_refused_too(client: httpx.Client) -> None:
    body = '{"queue": "team-a", "command": ["true"], "expected_duration": Infinity}'
    answer = client.post(
        "/v1/jobs",
        content=body,
        headers={"Authorization": f"Bearer {ALICE}", "content-type": "application/json"},
    )
    assert answer.status_code == 400


@pytest.mark.parametrize(
    "path",
    ["/v1/jobs/j-%00", "/v1/jobs?queue=team-a%00", "/v1/events?after=99999999999999999999999"],
)
def test_hostile_urls_are_4xx(client: httpx.Client, path: str) -> None:
    answer = client.get(path, headers={"Authorization": f"Bearer {ALICE}"})
    assert 400 <= answer.status_code < 500, answer.text


@pytest.mark.parametrize(
    "labels", [{"protected": "true"}, {"caldera.io/system": "true"}, {"Protected": "TRUE"}]
)
def test_protection_labels_need_a_permission(client: httpx.Client, labels: dict[str, str]) -> None:
    refused = post(client, labels=labels)
    assert refused.status_code == 403
    assert "may not set the protection label" in refused.json()["detail"]
    allowed = post(client, PROTECTOR, labels=labels)
    assert allowed.status_code == 201 and allowed.json()["labels"] == labels
    assert post(client, labels={"team": "vision"}).status_code == 201  # other labels: fine


def test_configured_size_limits(tmp_path: Path) -> None:
    with api(
        tmp_path, tasks_per_job=4, labels=2, label_value_length=8, env_vars=2, name_length=10
    ) as (client, _):
        check_size_limits(client)


def check_size_limits(client: httpx.Client) -> None:
    assert post(client, tasks=4, gpus=0).status_code == 201
    cases = [
        ({"tasks": 5, "gpus": 0}, "tasks: at most 4"),
        ({"gpus": 65}, "gpus: at most 64"),
        ({"labels": {"a": "1", "b": "2", "c": "3"}}, "labels: at most 2"),
        ({"labels": {"a": "123456789"}}, "longer than 8"),
        ({"env": {"A": "1", "B": "2", "C": "3"}}, "env: at most 2"),
        ({"name": "x" * 11}, "name: at most 10"),
    ]
    for fields, why in cases:
        answer = post(client, **fields)
        assert answer.status_code == 400 and why in answer.json()["detail"], (fields, answer.text)


def test_a_body_is_never_read_past_its_limit(tmp_path: Path) -> None:
    with api(tmp_path, body_bytes=4096) as (client, _):
        headers = {"Authorization": f"Bearer {ALICE}", "content-type": "application/json"}
        big = json.dumps({"queue": "team-a", "command": ["true"], "labels": {"x": "y" * 8000}})
        declared = client.post("/v1/jobs", content=big, headers=headers)
        assert declared.status_code == 413 and "limits.body_bytes" in declared.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the guard counts what arrives
            for start in range(0, len(big), 1000):
                yield big[start : start + 1000].encode()

        streamed = client.post("/v1/jobs", content=chunks(), headers=headers)
        assert streamed.status_code == 413
        assert post(client).status_code == 201


def test_submissions_per_second_are_limited_per_user(tmp_path: Path) -> None:
    with api(tmp_path, submit_rate=0.01, submit_burst=3) as (client, _):
        assert [post(client).status_code for _ in range(3)] == [201, 201, 201]
        limited = post(client)
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        assert "limits.submit_rate" in limited.json()["detail"]
        assert post(client, PROTECTOR).status_code == 201  # another user: their own bucket


def test_waiting_jobs_per_user_are_limited(tmp_path: Path) -> None:
    with api(tmp_path, pending_jobs_per_user=2) as (client, runtime):
        assert [post(client, gpus=8).status_code for _ in range(2)] == [201, 201]
        full = post(client, gpus=8)
        assert full.status_code == 429 and "Retry-After" in full.headers
        assert "2 jobs waiting" in full.json()["detail"]
        runtime.cycle()  # one starts: one waits, room for one more
        assert post(client, gpus=8).status_code == 201
        assert post(client, gpus=8).status_code == 429


def test_a_tail_of_a_huge_log_is_read_from_its_end(tmp_path: Path) -> None:
    with api(tmp_path) as (client, runtime):
        job = post(client, command=["sleep", "1"]).json()["id"]
        runtime.cycle()
        log = JobFiles(runtime.data_dir, job).log(0)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as handle:  # a 400 MiB single line, then one more (sparse)
            handle.truncate(400 * 1024 * 1024)
            handle.seek(0, 2)
            handle.write(b"\nlast line\n")
        headers = {"Authorization": f"Bearer {ALICE}"}
        answer = client.get(f"/v1/jobs/{job}/logs", params={"tail": 1}, headers=headers)
        assert answer.status_code == 200 and answer.content == b"last line\n"
        two = client.get(f"/v1/jobs/{job}/logs", params={"tail": 2}, headers=headers)
        assert len(two.content) <= 8 * 1024 * 1024  # the huge line: its last 8 MiB only
