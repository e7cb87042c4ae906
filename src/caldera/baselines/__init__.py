"""Baseline policies registered beside caldera (BASELINES.md)."""
