"""Text from users made safe to print or log: control characters (NUL, terminal escape
sequences, newlines) shown as `\\xNN`-style escapes. Standard library only."""

from __future__ import annotations

__all__ = ["printable"]


def printable(value: object, limit: int | None = None) -> str:
    """`value` as text with every control character escaped, cut to `limit` characters."""
    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
