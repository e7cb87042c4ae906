"""The simulation runtime: scenario files, workloads, the event-driven simulator, metrics."""

from caldera.config import Scenario
from caldera.sim.engine import Simulator, simulate
from caldera.sim.scenario import ScenarioError, load_scenario, parse_scenario

__all__ = ["Scenario", "ScenarioError", "Simulator", "load_scenario", "parse_scenario", "simulate"]
