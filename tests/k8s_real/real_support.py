"""Helpers for the real-control-plane tests: the node shape of the session's cluster, polling."""

from __future__ import annotations

from caldera.k8s.devcluster import NodeShape
from polling import wait_for

__all__ = ["NODES", "wait_for"]

NODES = NodeShape(count=4, gpus=8, per_hypernode=2, hypernodes_per_spine=2)
