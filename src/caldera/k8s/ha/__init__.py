"""Surviving restarts and running two replicas: leader election and the controller's state kept
in the cluster."""
