"""The dev cluster's one error (caldera.k8s.devcluster, caldera.k8s.devcluster_volcano)."""

from __future__ import annotations

__all__ = ["DevClusterError"]


class DevClusterError(RuntimeError):
    """The dev cluster could not be built, started or reached. The message is one line."""
