"""The service's smaller parts: the config file, GPU detection, process identity, the OpenAPI
schema, and `caldera serve` failing with one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from service_support import reachable_dir, write_config

from caldera.service.config import ConfigError, load_config, parse_config
from caldera.service.procs import process_alive, process_start_ticks, signal_group
from caldera.service.server import build_service

CALDERA = str(Path(sys.executable).parent / "caldera")
GOOD = {
    "queues": [{"name": "team-a", "weight": 2, "deserved": {"gpu": 8}}],
    "tokens": [{"token": "alice-token-1", "user": "alice", "queues": ["team-a"]}],
    "policy": {"grace_period": 30},
}


def test_config_reuses_the_scenario_queue_and_policy_keys() -> None:
    config = parse_config(GOOD)
    (queue,) = config.queues
    assert (queue.name, queue.weight, queue.deserved.gpu if queue.deserved else 0) == (
        "team-a",
        2,
        8000,
    )
    assert config.policy.grace_period == 30
    assert config.policy.week_offset > 0  # Unix time: windows need seconds since a Monday
    alice = config.tokens["alice-token-1"]
    assert alice.may_use("team-a") and not alice.may_use("ops") and not alice.critical


@pytest.mark.parametrize(
    ("change", "want"),
    [
        ({"queues": []}, "at least one queue"),
        ({"queues": [{"name": "a", "colour": 1}]}, "queues.0.colour: unknown key"),
        ({"tokens": [{"token": "short", "user": "x"}]}, "tokens.0.token"),
        ({"tokens": [{"token": "long-enough", "user": "x", "queues": ["nope"]}]}, "nope"),
        ({"policy": {"name": "no-such-policy"}}, "no-such-policy"),
    ],
    ids=["no-queues", "unknown-key", "short-token", "unknown-queue", "unknown-policy"],
)
def test_bad_config_is_one_line(change: dict[str, object], want: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({**GOOD, **change})
    assert want in str(error.value) and "\n" not in str(error.value)


def test_serve_with_a_bad_config_exits_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("queues: [ {name: a\n")
    done = subprocess.run(
        [CALDERA, "serve", "--config", str(bad), "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("caldera: error:") and "not valid YAML" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "missing.yaml")


def test_a_recycled_pid_is_never_signalled() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        ticks = process_start_ticks(child.pid)
        assert ticks is not None and process_alive(child.pid, ticks)
        assert not process_alive(child.pid, ticks + 1)
        assert not signal_group(child.pid, ticks + 1, signal.SIGTERM)
        assert child.poll() is None
        assert signal_group(child.pid, ticks, signal.SIGTERM)
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_openapi_documents_the_api_and_one_server_per_data_dir(tmp_path: Path) -> None:
    config = write_config(tmp_path / "caldera.yaml", GOOD)
    data = reachable_dir("caldera-parts-")
    service = build_service(config, data, gpus=8)
    try:
        schema = service.app.openapi()
        paths = schema["paths"]
        for path in (
            "/v1/jobs",
            "/v1/jobs/{job_id}",
            "/v1/jobs/{job_id}/cancel",
            "/v1/jobs/{job_id}/logs",
            "/v1/jobs/{job_id}/events",
            "/v1/events",
            "/v1/cluster",
            "/v1/queues",
            "/v1/queues/{name}",
            "/metrics",
        ):
            assert path in paths, path
        fields = schema["components"]["schemas"]["JobOut"]["properties"]
        assert {"id", "user", "state", "submit_time", "start_time", "end_time", "exit_code"} <= set(
            fields
        )
        with pytest.raises(Exception, match="another caldera server"):
            build_service(config, data, gpus=8)
    finally:
        service.close()


def test_names_are_printed_as_they_are_never_as_markup_or_escapes() -> None:
    """`caldera status`/`list` print what users named things: Rich markup stays text, terminal
    escapes and newlines (rows already stored before the API refused them) are shown escaped."""
    from rich.console import Console

    from caldera.cli.service_cmds import _plain

    console = Console(record=True, width=200, color_system=None)
    console.print(_plain("[bold red]fake[/bold red] \x1b[2J\nj-000000000000 Running"))
    shown = console.export_text()
    assert shown == "[bold red]fake[/bold red] \\x1b[2J\\nj-000000000000 Running\n"
