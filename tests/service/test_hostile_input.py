"""The issue's small attacks on a real server, SQLite and PostgreSQL (issue 15 items 1, 7):
NUL bytes (PostgreSQL refuses them in text: they were 500s), numbers that overflow (a 500,
and the keep-alive connection failed next), poisoned environment variables (201, then a
wedged loop), and a job name made of Rich markup printed by `caldera list`."""

from __future__ import annotations

import json

import httpx
from service_support import ALICE, OPS, job_state, wait_for


def test_hostile_requests_are_4xx_on_one_keep_alive_connection(make_server) -> None:
    server = make_server()
    headers = {"Authorization": f"Bearer {ALICE}"}
    hostile = [
        {"name": "nul\0name"},
        {"gpus": 1e308},
        {"cpu": 1e308},
        {"env": {"A=B": "x"}},
        {"env": {"": "x"}},
        {"env": {"A": "nul\0"}},
        {"command": ["sh", "-c", "echo \0"]},
    ]
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
        for fields in hostile:
            body = {"queue": "team-a", "command": ["true"], "gpus": 1, **fields}
            answer = api.post("/v1/jobs", json=body)
            assert answer.status_code == 400, (fields, answer.status_code, answer.text)
            assert "\n" not in answer.json()["detail"]
        for path in ("/v1/jobs/j-%00", "/v1/jobs?queue=%00"):
            assert api.get(path).status_code == 400, path
        # The same connection still serves, and the loop still starts jobs.
        fine = api.post("/v1/jobs", json={"queue": "team-a", "command": ["true"], "gpus": 1})
        assert fine.status_code == 201
    wait_for("the job to succeed", lambda: job_state(server, fine.json()["id"]) == "Succeeded")


def test_names_reach_the_terminal_as_plain_text(make_server) -> None:
    server = make_server()
    name = "[red]fake[/red]"
    job = server.client(ALICE).submit(["sleep", "30"], queue="team-a", name=name)["id"]
    listed = server.cli("list", token=OPS).stdout
    assert name in listed  # markup printed as it is, not interpreted
    shown = server.cli("status", job, token=OPS).stdout
    assert f"{job} ({name})" in shown
    assert json.loads(server.cli("status", job, "--json", token=OPS).stdout)["name"] == name
    server.client(ALICE).cancel(job)
