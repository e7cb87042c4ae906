"""The dev cluster's one error (caldera.devcluster and its modules)."""

from __future__ import annotations

from caldera.errors import ClusterError

__all__ = ["DevClusterError"]


class DevClusterError(ClusterError):
    """The dev cluster could not be built, started or reached. The message is one line."""
