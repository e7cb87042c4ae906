"""Fair share over time survives a restart of the service (issue 39, DESIGN §2): each queue's
decayed usage is kept in the database (table `fair_share`, migration 0004) at most
`SAVE_EVERY` seconds old and on stop, and a new server carries on from it. On SQLite and
PostgreSQL, with the in-memory process seam and the fake clock of
tests/service/test_runtime.py."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
from test_runtime import CONFIG, Clock, FakeLauncher, request

from caldera.core.fairshare import SAVE_EVERY
from caldera.model import JobState
from caldera.service.config import parse_config
from caldera.service.gpus import local_node
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for

HOUR = 3600.0
FAIR = {**CONFIG, "policy": {**CONFIG["policy"], "fair_share": {"half_life": HOUR}}}


def integral(gpu_milli: float, seconds: float) -> float:
    """∫0^seconds gpu_milli · 2^(-s/HOUR) ds: what holding `gpu_milli` for `seconds` adds."""
    return gpu_milli * HOUR / math.log(2) * (1 - 0.5 ** (seconds / HOUR))


def server(store: Store, tmp_path: Path, clock: Clock, config: dict[str, Any] = FAIR) -> Runtime:
    node, _ = local_node(8)
    runtime = Runtime(parse_config(config), store, tmp_path, (node,), FakeLauncher(), clock)
    runtime.recover()
    return runtime


@pytest.fixture
def store(tmp_path: Path, database_url: str | None) -> Any:
    """SQLite under the data dir, and PostgreSQL (tests/service/conftest.py)."""
    store = Store(database_url or database_url_for(tmp_path))
    store.migrate()
    yield store
    store.close()


def test_a_restarted_service_carries_on_from_the_decayed_usage_it_kept(
    store: Store, tmp_path: Path
) -> None:
    clock = Clock()
    first = server(store, tmp_path, clock)
    job_id = first.submit(request(), "ops")["id"]  # 8 GPUs of team-a
    first.cycle()
    assert first.jobs[job_id].state is JobState.RUNNING
    clock.now += HOUR
    first.cycle()  # a cycle an hour later: the usage is due to be kept
    kept = store.decayed_usage()
    assert kept is not None and kept.at == clock.now
    assert kept.used["team-a"] == pytest.approx(integral(8000, HOUR))
    assert kept.held == {"team-a": 8000}

    # The server dies without a word (no stop); its task keeps running and is adopted. An
    # hour later, the new server counts the kept usage, halved, and the hour of downtime.
    clock.now += HOUR
    second = server(store, tmp_path, clock)
    assert second.jobs[job_id].state is JobState.RUNNING
    second.snapshot(clock.now)
    usage = second.kernel.decayed_usage
    assert usage is not None
    assert usage.view()["team-a"] == pytest.approx(integral(8000, 2 * HOUR))


def test_usage_is_kept_once_a_minute_and_on_stop(store: Store, tmp_path: Path) -> None:
    clock = Clock()
    runtime = server(store, tmp_path, clock)
    runtime.submit(request(), "ops")
    runtime.cycle()
    first = store.decayed_usage()
    assert first is not None and first.at == clock.now  # never kept: kept at once
    clock.now += SAVE_EVERY / 2
    runtime.cycle()
    assert store.decayed_usage() == first  # not yet due
    clock.now += SAVE_EVERY / 4
    runtime.stop()  # on stop, whatever is due
    last = store.decayed_usage()
    assert last is not None and last.at == first.at + SAVE_EVERY / 2
    assert last.used["team-a"] == pytest.approx(integral(8000, SAVE_EVERY / 2))


def test_without_fair_share_nothing_is_kept(store: Store, tmp_path: Path) -> None:
    clock = Clock()
    runtime = server(store, tmp_path, clock, CONFIG)
    runtime.submit(request(), "ops")
    runtime.cycle()
    clock.now += HOUR
    runtime.cycle()
    runtime.stop()
    assert store.decayed_usage() is None
    assert runtime.kernel.decayed_usage is None


def test_a_failed_write_is_one_log_line_and_the_cycle_carries_on(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    runtime = server(store, tmp_path, clock)
    job_id = runtime.submit(request(), "ops")["id"]

    def down() -> Any:
        raise RuntimeError("database is down\nsecond line")

    monkeypatch.setattr(runtime.actuator, "flush", lambda: None)  # the job's rows: not here
    monkeypatch.setattr(store, "batch", down)
    with caplog.at_level(logging.WARNING, logger="caldera.service"):
        runtime.cycle()
    assert runtime.jobs[job_id].state is JobState.RUNNING
    assert [r.getMessage() for r in caplog.records] == ["decayed usage not kept: database is down"]
