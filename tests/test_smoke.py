"""The shipped examples run end to end and validate against the published output schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from caldera.sim import load_scenario, simulate


@pytest.mark.parametrize("name", ["mixed-small.yaml", "seed-starvation.yaml"])
def test_examples_validate_against_schema(shared: Path, name: str) -> None:
    schema = json.loads((shared / "schemas" / "simulate-output.schema.json").read_text())
    result = simulate(load_scenario(shared / "examples" / name))
    jsonschema.validate(result, schema)
    assert result["metrics"]["critical_preempted"] == 0
    assert result["metrics"]["gang_hang_gpu_hours"] == 0
