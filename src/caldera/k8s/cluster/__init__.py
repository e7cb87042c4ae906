"""The one I/O seam to a cluster and what stands behind it: the official client, its transport,
the informer cache, and the in-memory cluster of the fast tests."""
