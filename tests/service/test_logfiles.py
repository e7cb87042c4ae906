"""Bounded task logs (issue 15 item 7): the runner's log rotates at its limit and keeps a fixed
number of older files; a tail is read from the end, so the last line of a huge single-line
log costs what it returns, not the file's size."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from caldera.service.logfiles import RotatingLog, rotated, tail


def test_a_log_rotates_at_its_limit_and_keeps_a_fixed_number_of_files(tmp_path: Path) -> None:
    path = tmp_path / "task-0.log"
    log = RotatingLog(path, max_bytes=1000, keep=2)
    for i in range(500):
        log.write(f"line {i:04d} ".encode() * 3 + b"\n")  # 31 bytes a line, 15.5 kB in all
    log.close()
    assert path.stat().st_size <= 1000
    assert rotated(path, 1).stat().st_size == 1000 and rotated(path, 2).stat().st_size == 1000
    assert not rotated(path, 3).exists()
    assert path.read_bytes().endswith(b"line 0499 line 0499 line 0499 \n")
    # An append to an existing log goes on where it was.
    again = RotatingLog(path, max_bytes=1000, keep=0)
    again.write(b"x" * 5000)
    again.close()
    assert path.stat().st_size == 500  # (500 + 5000) mod 1000: each full file was dropped


def test_a_tail_reads_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    with open(path, "wb") as handle:
        handle.truncate(200 * 1024 * 1024)  # a 200 MiB single line (sparse: free to make)
        handle.seek(0, 2)
        handle.write(b"\nsecond to last\nlast\n")
    tracemalloc.start()
    try:
        assert tail(path, 1, 8 << 20) == b"last\n"
        assert tail(path, 2, 8 << 20) == b"second to last\nlast\n"
        three = tail(path, 3, 8 << 20)  # the huge line: only its last 8 MiB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(three) <= 8 << 20 and three.endswith(b"\nsecond to last\nlast\n")
    assert peak < 40 << 20, f"a tail of a 200 MiB log used {peak >> 20} MiB"
    assert tail(tmp_path / "missing.log", 5, 1024) == b""
    short = tmp_path / "short.log"
    short.write_bytes(b"a\nb\nc")
    assert (tail(short, 2, 1024), tail(short, 10, 1024), tail(short, 0, 1024)) == (
        b"b\nc",
        b"a\nb\nc",
        b"",
    )
