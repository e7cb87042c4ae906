"""Malformed scenario files, tried as a new user would: through the real `caldera` command.

Each must give exactly one line on stderr that names the problem, exit code 2, no
traceback and nothing on stdout (DESIGN §6, issue 2 §3). The commands run concurrently in
one session fixture so the whole table costs about one CLI start-up per core.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

CALDERA = Path(sys.executable).with_name("caldera")

CLUSTER = "cluster: {nodes: [{prefix: n, count: 1, gpus: 8}]}\nqueues: [{name: q}]\n"
JOB = "{name: a, queue: q, type: normal, submit: 0, duration: 10"


@dataclass(frozen=True)
class Bad:
    name: str
    file: str
    content: str | bytes | None  # None: do not create (missing); "/" suffix: a directory
    want: str  # a fragment the one-line error must contain


CASES = [
    Bad("bad YAML", "broken.yaml", "cluster: [\n  nodes: {", "invalid YAML at line 2"),
    Bad("tab indentation", "tabs.yaml", "cluster:\n\tnodes: []\n", "invalid YAML"),
    Bad("empty file", "empty.yaml", "", "empty"),
    Bad("only a comment", "comment.yaml", "# nothing yet\n", "empty"),
    Bad("top level is a list", "list.yaml", "- cluster: {}\n", "mapping"),
    Bad(
        "missing duration",
        "noduration.yaml",
        CLUSTER + "jobs: [{name: a, queue: q, type: normal, submit: 0}]\n",
        "jobs[0].duration",
    ),
    Bad(
        "unknown job type",
        "jobtype.yaml",
        CLUSTER + "jobs: [{name: a, queue: q, type: urgent, submit: 0, duration: 10}]\n",
        "jobs[0].type",
    ),
    Bad(
        "negative node count",
        "count.yaml",
        "cluster: {nodes: [{prefix: n, count: -2, gpus: 8}]}\n",
        "cluster.nodes[0].count",
    ),
    Bad("unknown key", "key.yaml", CLUSTER + f"jobs: [{JOB}, gpus: 2}}]\n", "jobs[0].gpus"),
    Bad(
        "wrong type",
        "wrongtype.yaml",
        CLUSTER + "jobs: [{name: a, queue: q, type: normal, submit: 0, duration: an hour}]\n",
        "jobs[0].duration",
    ),
    Bad(
        "duplicate job name",
        "dup.yaml",
        CLUSTER + f"jobs: [{JOB}}}, {JOB}}}]\n",
        "duplicate job name 'a'",
    ),
    Bad("directory instead of a file", "adir/", None, "is a directory"),
    Bad("missing file", "nothere.yaml", None, "no such file"),
    Bad("JSON syntax error", "broken.json", '{"cluster": {"nodes": [}', "invalid JSON at line 1"),
    Bad(
        "island does not divide the node",
        "island.yaml",
        "cluster: {nodes: [{prefix: n, count: 1, gpus: 8, nvlink_island: 3}]}\n",
        "nvlink_island",
    ),
    Bad("unknown policy", "policy.yaml", CLUSTER + "policy: {name: nope}\n", "unknown policy"),
    Bad(
        "unknown generator",
        "gen.yaml",
        CLUSTER + "workload: {generators: [{kind: poisson}]}\n",
        "workload.generators[0]",
    ),
    Bad("not UTF-8", "binary.yaml", b"\xff\xfe\x00garbage", "cannot read"),
]

B5 = Bad(
    "queue quota memory",
    "quota.yaml",
    "cluster: {nodes: [{prefix: n, count: 1, gpus: 8}]}\n"
    "queues: [{name: q, deserved: {memory: lots}}]\n",
    "queues[0]",
)


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def _make(tmp: Path, bad: Bad) -> Path:
    path = tmp / bad.file.rstrip("/")
    if bad.file.endswith("/"):
        path.mkdir()
    elif isinstance(bad.content, bytes):
        path.write_bytes(bad.content)
    elif bad.content is not None:
        path.write_text(bad.content, encoding="utf-8")
    return path


def _simulate(path: Path) -> Outcome:
    done = subprocess.run(
        [str(CALDERA), "simulate", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    tmp = tmp_path_factory.mktemp("bad-scenarios")
    paths = {bad.name: _make(tmp, bad) for bad in [*CASES, B5]}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(_simulate, path) for name, path in paths.items()}
        yield {name: future.result() for name, future in futures.items()}


def _assert_one_line_error(outcome: Outcome, bad: Bad) -> None:
    assert outcome.code == 2, outcome
    assert outcome.stdout == ""
    assert "Traceback" not in outcome.stderr
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome.stderr
    line = lines[0]
    assert line.startswith("caldera: error: ")
    assert bad.file.rstrip("/") in line  # which file
    assert bad.want in line  # what is wrong, and where


@pytest.mark.parametrize("bad", CASES, ids=[c.name for c in CASES])
def test_bad_file_gives_one_line_and_exit_2(bad: Bad, outcomes: dict[str, Outcome]) -> None:
    _assert_one_line_error(outcomes[bad.name], bad)


def test_bad_file_names_the_field_of_a_queue_quota(outcomes: dict[str, Outcome]) -> None:
    _assert_one_line_error(outcomes[B5.name], B5)


def test_a_good_file_runs_and_prints_json(tmp_path: Path) -> None:
    """The control: the same harness on a valid file gives exit 0 and one JSON document."""
    path = tmp_path / "ok.yaml"
    path.write_text(CLUSTER + f"jobs: [{JOB}}}]\n", encoding="utf-8")
    outcome = _simulate(path)
    assert outcome.code == 0, outcome.stderr
    document = json.loads(outcome.stdout)
    assert [j["state"] for j in document["jobs"]] == ["Succeeded"]
