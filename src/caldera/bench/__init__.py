"""Benchmarks behind `caldera bench …` (figures go to docs/benchmarks.md)."""
