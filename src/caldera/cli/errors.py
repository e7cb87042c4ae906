"""One-line errors and exit codes shared by every command."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILURE", "fail", "stderr"]

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print `caldera: error: MESSAGE` on one line to stderr and exit with `code`."""
    text = " ".join(str(message).split())
    stderr.print(f"caldera: error: {text}", markup=False)
    raise typer.Exit(code)
