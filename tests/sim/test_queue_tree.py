"""Departments above teams in the scenario format (DESIGN §2 "Hierarchy", §6 extension): a
`parent` key on a queue, and a one-line error for every tree that cannot be used."""

from __future__ import annotations

from typing import Any

import pytest

from caldera.config import DeploymentModel, parse_deployment
from caldera.errors import ConfigError, ScenarioError
from caldera.model.queues import departments
from caldera.sim import parse_scenario, simulate

NODES = {"nodes": [{"prefix": "n", "count": 2, "gpus": 8, "cpu": 64, "memory": "512Gi"}]}


def scenario(queues: list[dict[str, Any]], jobs: list[dict[str, Any]] | None = None) -> Any:
    return {"cluster": NODES, "queues": queues, "jobs": jobs or []}


TREE = [
    {"name": "research", "deserved": {"gpu": 8}, "guarantee": {"gpu": 4}},
    {"name": "vision", "parent": "research", "deserved": {"gpu": 4}, "guarantee": {"gpu": 2}},
    {"name": "nlp", "parent": "research", "deserved": {"gpu": 4}},
    {"name": "prod", "deserved": {"gpu": 8}},
]


def test_a_tree_parses_and_names_its_departments() -> None:
    parsed = parse_scenario(scenario(TREE))
    by_name = {q.name: q for q in parsed.queues}
    assert by_name["vision"].parent == "research"
    assert by_name["prod"].parent is None
    assert departments(parsed.queues) == {"research"}


BAD = [
    ("unknown-parent", [{"name": "a", "parent": "nowhere"}], "unknown parent 'nowhere'"),
    ("own-parent", [{"name": "a", "parent": "a"}], "cannot be its own parent"),
    (
        "cycle",
        [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}],
        "form a cycle",
    ),
    (
        "three-levels",
        [{"name": "a"}, {"name": "b", "parent": "a"}, {"name": "c", "parent": "b"}],
        "has a parent itself",
    ),
    (
        "guarantee-sum",
        [
            {"name": "d", "guarantee": {"gpu": 4}},
            {"name": "a", "parent": "d", "guarantee": {"gpu": 3}},
            {"name": "b", "parent": "d", "guarantee": {"gpu": 2}},
        ],
        "children's guarantee (gpu) sum above its own",
    ),
    (
        "deserved-sum",
        [
            {"name": "d", "deserved": {"gpu": 4}},
            {"name": "a", "parent": "d", "deserved": {"gpu": 5}},
        ],
        "children's deserved (gpu) sum above its own",
    ),
    (
        "capability",
        [
            {"name": "d", "capability": {"gpu": 4}},
            {"name": "a", "parent": "d", "capability": {"gpu": 8}},
        ],
        "capability above its parent 'd'",
    ),
    (
        "department-window",
        [{"name": "d", "time_windows": [{"hours": [9, 18]}]}, {"name": "a", "parent": "d"}],
        "takes no time_sharing or time_windows",
    ),
]


@pytest.mark.parametrize(("queues", "want"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_an_unusable_tree_is_one_line(queues: list[dict[str, Any]], want: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(scenario(queues))
    message = str(raised.value)
    assert "\n" not in message and want in message and message.startswith("queues: ")
    with pytest.raises(ConfigError) as config:
        parse_deployment(DeploymentModel.model_validate({"queues": queues}))
    assert "\n" not in str(config.value) and want in str(config.value)


def test_a_job_submitted_to_a_department_is_a_one_line_error() -> None:
    job = {"name": "j", "queue": "research", "type": "normal", "submit": 0, "duration": 60}
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]: queue 'research' is a department"):
        parse_scenario(scenario(TREE, [job]))


def test_an_empty_parent_name_is_refused() -> None:
    with pytest.raises(ScenarioError, match="parent"):
        parse_scenario(scenario([{"name": "a", "parent": ""}]))


def test_a_department_rejects_work_reaching_it_at_runtime() -> None:
    """Generated or served work that names a department is rejected, never run."""
    data = scenario(TREE)
    data["workload"] = {
        "generators": [
            {
                "kind": "stream",
                "name": "s",
                "queue": "research",
                "type": "normal",
                "start": 0,
                "every": 60,
                "count": 2,
                "duration": 60,
            }
        ]
    }
    result = simulate(parse_scenario(data))
    assert {j["state"] for j in result["jobs"]} == {"Rejected"}
    rejects = [e for e in result["events"] if e["kind"] == "reject"]
    assert rejects and all("is a department" in e["reason"] for e in rejects)


def test_a_department_capability_is_checked_at_admission() -> None:
    queues = [
        {"name": "d", "capability": {"gpu": 4}},
        {"name": "a", "parent": "d"},
    ]
    job = {
        "name": "j",
        "queue": "a",
        "type": "normal",
        "submit": 0,
        "duration": 60,
        "tasks": 1,
        "gpus_per_task": 8,
    }
    result = simulate(parse_scenario(scenario(queues, [job])))
    assert result["jobs"][0]["state"] == "Rejected"
    assert "capability of queue 'd'" in next(
        e["reason"] for e in result["events"] if e["kind"] == "reject"
    )
