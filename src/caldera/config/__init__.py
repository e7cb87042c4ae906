"""The configuration schema and what it builds, shared by every runtime.

- `schema`    pydantic models of queues, policy settings, tokens and topology
- `build`     models → `Queue`, `PolicyConfig`, `Principal`; `parse_deployment` for the
              service's and the controller's file (DESIGN §8)
- `scenario`  the parsed form of a scenario file (`Scenario`, `Submission`)

It sits above the core and the policy registry and below every runtime: the simulator, the
service and the Kubernetes controller import it, never each other.
"""

from caldera.config.build import (
    Deployment,
    Principal,
    build_queue,
    one_line,
    parse_deployment,
    policy_config,
    read_yaml,
)
from caldera.config.scenario import Scenario, Submission
from caldera.config.schema import (
    CheckpointModel,
    ConfigFileModel,
    DeploymentModel,
    Number,
    PolicyModel,
    Quantity,
    QueueModel,
    QuotaModel,
    StrictModel,
    TimeWindowModel,
    TokenModel,
    TopologyModel,
)

__all__ = [
    "CheckpointModel",
    "ConfigFileModel",
    "Deployment",
    "DeploymentModel",
    "Number",
    "PolicyModel",
    "Principal",
    "Quantity",
    "QueueModel",
    "QuotaModel",
    "Scenario",
    "StrictModel",
    "Submission",
    "TimeWindowModel",
    "TokenModel",
    "TopologyModel",
    "build_queue",
    "one_line",
    "parse_deployment",
    "policy_config",
    "read_yaml",
]
