"""The policy registry: every policy a runtime may name, by name.

It sits above what it registers (Volcano's `actions/factory.go`): the core defines `Policy`
and caldera's own composition (`caldera.core.CALDERA`), the baselines define theirs
(`caldera.baselines`), and only this module knows them all. The core never imports the
baselines; the simulator, the service and the Kubernetes runtime look a policy up here and
hand the object to `caldera.core.run(snapshot, policy)`.
"""

from __future__ import annotations

from caldera.baselines import BASELINES
from caldera.core import CALDERA, Policy
from caldera.errors import NotFound

__all__ = ["get_policy", "policy_names", "register_policy"]

_REGISTRY: dict[str, Policy] = {policy.name: policy for policy in (CALDERA, *BASELINES)}


def register_policy(policy: Policy) -> Policy:
    """Add (or replace) a policy under its name; returns it, for `X = register_policy(…)`."""
    _REGISTRY[policy.name] = policy
    return policy


def get_policy(name: str) -> Policy:
    """The policy called `name`; NotFound (one line, listing the known names) otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise NotFound(f"unknown policy {name!r} (known: {known})") from None


def policy_names() -> list[str]:
    return sorted(_REGISTRY)
