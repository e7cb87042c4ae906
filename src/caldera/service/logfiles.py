"""Task logs: bounded with rotation when written, read from the end for a tail.

The runner writes each task's output through `RotatingLog`: when `task-R.log` would grow past
`max_bytes` it becomes `task-R.log.1` (the older ones shift up to `.KEEP`, the oldest is
dropped) and a fresh file starts, so one task's log never takes more than
`max_bytes × (keep + 1)`. `tail()` reads backwards from the end in blocks, so the last lines of
a huge log cost what they hold, not the file's size. Standard library only: every task's
runner imports this module.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["RotatingLog", "rotated", "tail"]

_BLOCK = 64 * 1024


def rotated(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.{index}")


class RotatingLog:
    """Append bytes to `path`, rotating at `max_bytes` and keeping `keep` older files."""

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        if max_bytes < 1 or keep < 0:
            raise ValueError("a log needs max_bytes >= 1 and keep >= 0")
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._fd = self._open()
        self.size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)

    def write(self, data: bytes) -> None:
        while data:
            room = self.max_bytes - self.size
            if room <= 0:
                self.rotate()
                continue
            part, data = data[:room], data[room:]
            os.write(self._fd, part)  # regular file, O_APPEND: written whole
            self.size += len(part)

    def rotate(self) -> None:
        os.close(self._fd)
        if self.keep == 0:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        else:
            for index in range(self.keep, 1, -1):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(rotated(self.path, index - 1), rotated(self.path, index))
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path, rotated(self.path, 1))
        self._fd = self._open()
        self.size = 0

    def close(self) -> None:
        os.close(self._fd)


def tail(path: Path, lines: int, max_bytes: int) -> bytes:
    """The last `lines` lines of `path` (at most its last `max_bytes` bytes), read from the
    end. A missing file is empty."""
    if lines <= 0 or max_bytes <= 0:
        return b""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return b""
    with handle:
        end = os.fstat(handle.fileno()).st_size
        floor = max(end - max_bytes, 0)
        position = end
        chunks: list[bytes] = []
        newlines = 0
        # A final newline ends the last line; it does not start an empty one.
        wanted = lines
        while position > floor:
            size = min(_BLOCK, position - floor)
            position -= size
            handle.seek(position)
            block = handle.read(size)
            if not chunks and block.endswith(b"\n"):
                wanted += 1
            chunks.append(block)
            newlines += block.count(b"\n")
            if newlines >= wanted:
                break
        data = b"".join(reversed(chunks))
    parts = data.split(b"\n")
    if len(parts) > wanted:
        parts = parts[-wanted:]
    return b"\n".join(parts)
