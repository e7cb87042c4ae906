"""`POST /v1/jobs` answers the same with the short path for well-formed submissions
(`caldera.service.api.submit_route`) as through FastAPI's routing alone: every request below is
sent to two services with the same configuration, one of them without the short path, and the
answers (status, headers, body) and the audit rows must be the same, refusals included."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_support import ALICE, BOB, reachable_dir, write_config

from caldera.model import QueueState
from caldera.service.api.submit_route import SubmitRoute
from caldera.service.server import Service, build_service

CONFIG = {
    "queues": [{"name": "team-a", "weight": 1}, {"name": "closed", "weight": 1}],
    "tokens": [
        {"token": ALICE, "user": "alice", "queues": ["team-a", "closed"]},
        {"token": BOB, "user": "bob", "queues": ["closed"]},
    ],
    "limits": {"name_length": 16, "submit_rate": 0.001, "submit_burst": 5},
}
JOB = {"queue": "team-a", "command": ["sleep", "30"], "gpus": 1}
AS_ALICE = {"Authorization": f"Bearer {ALICE}"}

# (what it checks, headers, body, the status wanted): a dict body is sent as JSON, bytes as
# they are. Admission's token bucket holds 5: the requests that reach it are counted in [].
REQUESTS: list[tuple[str, dict[str, str], Any, int]] = [
    ("accepted [1]", AS_ALICE, JOB, 201),
    (
        "accepted with every field [2]",
        AS_ALICE,
        {
            **JOB,
            "name": "full",
            "type": "debug",
            "env": {"A": "1"},
            "labels": {"team": "x"},
            "checkpoint": {"interval": 60},
            "max_retries": 1,
            "expected_duration": 60,
        },
        201,
    ),
    (
        "content type with a charset [3]",
        {**AS_ALICE, "Content-Type": "application/json; charset=utf-8"},
        JOB,
        201,
    ),
    ("a gang no node can host [4]", AS_ALICE, {**JOB, "tasks": 2, "gpus": 1}, 400),
    ("closed queue [5]", AS_ALICE, {**JOB, "queue": "closed"}, 409),
    ("unknown queue", AS_ALICE, {**JOB, "queue": "nope"}, 400),
    ("queue not allowed", {"Authorization": f"Bearer {BOB}"}, JOB, 403),
    ("critical without permission", AS_ALICE, {**JOB, "type": "critical"}, 403),
    ("protection label without permission", AS_ALICE, {**JOB, "labels": {"protected": "1"}}, 403),
    ("impossible resources", AS_ALICE, {**JOB, "cpu": 1e308}, 400),
    ("over a size limit", AS_ALICE, {**JOB, "name": "n" * 17}, 400),
    ("no token", {}, JOB, 401),
    ("unknown token", {"Authorization": "Bearer nobody-0000"}, JOB, 401),
    ("another scheme", {"Authorization": f"Basic {ALICE}"}, JOB, 401),
    ("not JSON", {**AS_ALICE, "Content-Type": "application/json"}, b"{not json", 400),
    ("no body", {**AS_ALICE, "Content-Type": "application/json"}, b"", 400),
    ("a JSON list", AS_ALICE, [JOB], 400),
    ("an unknown field", AS_ALICE, {**JOB, "colour": "red"}, 400),
    ("a field of the wrong type", AS_ALICE, {**JOB, "tasks": "many"}, 400),
    ("no command", AS_ALICE, {"queue": "team-a"}, 400),
    ("text content type", {**AS_ALICE, "Content-Type": "text/plain"}, b'{"queue": "x"}', 400),
    ("over the submission rate", AS_ALICE, JOB, 429),
]

_VARYING = ("id", "submit_time")  # a new job's id and time differ between the two services


def _service(short_path: bool) -> Service:
    folder = reachable_dir("caldera-submit-route-")
    config = write_config(folder / "caldera.yaml", CONFIG)
    service = build_service(config, folder / "data", 1)
    if not short_path:  # the middleware stack is built at the first request
        service.app.user_middleware = [
            m for m in service.app.user_middleware if m.cls is not SubmitRoute
        ]
    service.runtime.set_queue_state("closed", QueueState.CLOSED)
    return service


@pytest.fixture
def services() -> Iterator[tuple[Service, Service]]:
    short, reference = _service(True), _service(False)
    try:
        yield short, reference
    finally:
        short.close()
        reference.close()


def _send(service: Service) -> list[httpx.Response]:
    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(
            app=service.app, raise_app_exceptions=False, client=("127.0.0.1", 50000)
        )
        answers = []
        async with httpx.AsyncClient(transport=transport, base_url="http://caldera") as api:
            for _, headers, body, _ in REQUESTS:
                if isinstance(body, bytes):
                    answers.append(await api.post("/v1/jobs", content=body, headers=headers))
                else:
                    answers.append(await api.post("/v1/jobs", json=body, headers=headers))
        return answers

    return asyncio.run(send())


def _seen(answer: httpx.Response) -> tuple[Any, ...]:
    try:
        body = answer.json()
    except ValueError:
        body = answer.text
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in _VARYING}
    headers = sorted((k, v) for k, v in answer.headers.items() if k != "server-timing")
    return answer.status_code, headers, body


def _audited(service: Service) -> list[tuple[Any, ...]]:
    return [
        (row["user"], row["action"], row["status"], row["target"] is None, row["detail"])
        for row in service.store.audit()
    ]


def test_the_short_path_answers_as_fastapi_does(services: tuple[Service, Service]) -> None:
    short, reference = services
    answers = _send(short)
    expected = _send(reference)
    for (case, _, _, status), got, want in zip(REQUESTS, answers, expected, strict=True):
        assert got.status_code == status, (case, got.text)
        assert _seen(got) == _seen(want), case
    assert _audited(short) == _audited(reference)
    assert len(short.store.jobs()) == len(reference.store.jobs()) == 3
