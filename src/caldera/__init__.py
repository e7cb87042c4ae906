"""caldera: a GPU-cluster scheduler (README.md)."""

from caldera.compiled import install_guard

install_guard()  # a compiled core that does not match its sources is not used (compiled.py)
