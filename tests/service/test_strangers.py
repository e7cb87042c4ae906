"""Callers without a known token are bounded (issue 38 item 2): per client address, failed
authentications past a burst are answered 429 before any route runs, and the audit log
tallies them instead of growing a row per request (`caldera.service.api.strangers`,
`caldera.service.audit.FailureTally`)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_support import ALICE, Server

from caldera.service.api.strangers import TOO_MANY, StrangerLimit, known_token
from caldera.service.audit import FailureTally
from caldera.service.store import Store, database_url_for
from polling import wait_for


def _row(t: float, client: str = "10.0.0.1", status: int = 401) -> dict[str, Any]:
    return {
        "t": t,
        "user": None,
        "client": client,
        "method": "POST",
        "path": "/v1/jobs",
        "action": "submit",
        "target": None,
        "status": status,
        "detail": {"error": "invalid token"},
    }


def test_a_windows_failures_are_one_row_and_one_tally() -> None:
    tally = FailureTally(window=60)
    assert tally.first(_row(100.0))
    assert not any(tally.first(_row(100.0 + i)) for i in range(1, 50))
    assert tally.first(_row(101.0, client="10.0.0.2"))  # another address: its own row
    assert tally.ended(159.0) == []
    (row,) = tally.ended(160.0)  # 10.0.0.1's window is over; 10.0.0.2 had one failure
    assert row["action"] == "auth_failures" and row["client"] == "10.0.0.1"
    assert row["detail"] == {"error": "invalid token", "count": 49, "first": 101.0, "last": 149.0}
    assert tally.drain() == []
    assert tally.first(_row(170.0))  # a new window


def test_past_its_keys_the_tally_counts_new_addresses_together() -> None:
    tally = FailureTally(window=60, keys=2)
    assert [tally.first(_row(1.0, client=f"10.0.0.{i}")) for i in range(5)] == [
        True, True, True, False, False
    ]  # fmt: skip
    (row,) = tally.drain()
    assert (row["client"], row["detail"]["count"]) == ("*", 2)


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stranger_gets_429_after_its_burst_of_401s_and_a_user_never_does() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        known = any(
            name == b"authorization" and v == b"Bearer good" for name, v in scope["headers"]
        )
        await send({"type": "http.response.start", "status": 200 if known else 401})
        await send({"type": "http.response.body", "body": b""})

    clock = _Clock()
    gate = StrangerLimit(app, {"good": object()}, rate=1.0, burst=3, clock=clock)

    def call(token: str, address: str = "10.0.0.1") -> int:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        headers = [(b"authorization", f"Bearer {token}".encode())]
        scope = {"type": "http", "headers": headers, "client": (address, 1)}
        asyncio.run(gate(scope, None, send))
        return int(sent[0]["status"])

    assert [call("bad") for _ in range(5)] == [401, 401, 401, 429, 429]
    assert call("good") == 200  # the same address, a known token
    assert call("bad", "10.0.0.2") == 401  # another address has its own bucket
    clock.now += 1.0
    assert call("bad") == 401  # one failure a second


def _p99(api: httpx.Client) -> float:
    spent = []
    for _ in range(100):
        began = time.perf_counter()
        assert api.get("/v1/jobs", headers={"Authorization": f"Bearer {ALICE}"}).status_code == 200
        spent.append(time.perf_counter() - began)
    return statistics.quantiles(spent, n=100)[98] * 1000


@pytest.mark.parametrize("database_url", [None])  # the WAL measured is SQLite's
def test_a_flood_of_bad_tokens_is_refused_and_leaves_a_bounded_audit_log(make_server) -> None:
    server: Server = make_server()
    wal = Path(str(database_url_for(server.data_dir)).removeprefix("sqlite:///") + "-wal")
    api = httpx.Client(base_url=server.url, timeout=30)
    _p99(api)  # warm: the first requests pay for imports and connections
    quiet_p99 = _p99(api)
    wal_before = wal.stat().st_size if wal.exists() else 0
    job = {"queue": "team-a", "command": ["true"], "gpus": 0}
    statuses: list[int] = []

    def flood() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as stranger:
            for i in range(3000):
                headers = {"Authorization": f"Bearer bad-{i}"}
                statuses.append(stranger.post("/v1/jobs", json=job, headers=headers).status_code)

    began = time.perf_counter()
    flooding = threading.Thread(target=flood)
    flooding.start()
    wait_for("the flood to pass its burst", lambda: len(statuses) > 100, timeout=60)
    flood_p99 = _p99(api)  # alice, from the same address, during the flood
    flooding.join()
    flood_s = time.perf_counter() - began
    wal_after = wal.stat().st_size if wal.exists() else 0
    refused = api.post("/v1/jobs", json=job, headers={"Authorization": "Bearer bad"})
    assert refused.status_code == 429 and refused.json()["detail"] == TOO_MANY
    assert int(refused.headers["retry-after"]) >= 1
    api.close()
    assert statuses[:20] == [401] * 20  # limits.auth_failure_burst
    assert statuses.count(401) <= 20 + flood_s * 1.0 + 1  # then one a second
    server.stop()  # the tallies still open are written as the server stops
    store = Store(database_url_for(server.data_dir))
    try:
        rows = store.audit()
    finally:
        store.close()
    tallies = {r["status"]: r["detail"] for r in rows if r["action"] == "auth_failures"}
    singles = [r for r in rows if r["action"] == "submit"]
    assert [r["status"] for r in singles] == [401, 429]
    assert tallies[401]["count"] + tallies[429]["count"] + 2 == 3001  # the flood, `refused`
    assert len(rows) == 4
    print(
        f"\nflood: 3000 bad-token POSTs in {flood_s:.1f} s: {statuses.count(401)} x 401, "
        f"{statuses.count(429)} x 429; audit rows {len(rows)}; WAL {wal_before / 1e6:.2f} -> "
        f"{wal_after / 1e6:.2f} MB; alice's GET /v1/jobs p99 {quiet_p99:.1f} ms before, "
        f"{flood_p99:.1f} ms during it"
    )


def test_the_dashboards_cookie_is_a_known_token_too() -> None:
    tokens = {"good-token": object()}
    cookie = [(b"cookie", b"theme=dark; caldera_token=good-token")]
    assert known_token({"headers": cookie}, tokens)
    assert not known_token({"headers": [(b"cookie", b"caldera_token=guess")]}, tokens)
    assert not known_token({"headers": [(b"authorization", b"Basic good-token")]}, tokens)
