"""JSON from the API server, decoded with a bound on nesting.

The API server stores a TrainingJob's pod template as its tenant wrote it, and accepts far
deeper nesting than Python's JSON decoder, which recurses: a template nested 1,100 levels
made `json.loads` raise `RecursionError` on every list and watch event of its namespace,
and that namespace's informer died (issue 34). `loads` decodes as `json.loads` does; only
when that runs out of depth does it rewrite the text, with an iterative scan, so that every
value nested deeper than `DECODE_DEPTH` becomes the string `TOO_DEEP`, and decode that.
The object keeps its identity (metadata, spec) and its shape near the top, so the intake
can reject it by name with a one-line reason (`caldera.k8s.reading.podtemplate.nesting_problem`
refuses far shallower templates), and nothing past the decoder ever sees the deep part.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["DECODE_DEPTH", "TOO_DEEP", "loads"]

DECODE_DEPTH = 100  # levels kept; well inside Python's recursion limit for later copies
TOO_DEEP = "<nested too deep>"

# A JSON string (escapes included) or one bracket: what the depth scan needs to see.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def loads(data: bytes | str) -> Any:
    """`json.loads`, but a document nested past `DECODE_DEPTH` decodes with its deep
    values replaced by `TOO_DEEP` instead of raising `RecursionError`."""
    try:
        return json.loads(data)
    except RecursionError:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        return json.loads(flatten(text, DECODE_DEPTH))


def flatten(text: str, depth: int) -> str:
    """`text` with every object or array that opens below `depth` levels replaced by the
    JSON string `TOO_DEEP`. A linear scan with a counter: no recursion."""
    out: list[str] = []
    level = 0
    cut_from = -1  # where the value being replaced began; -1 while none is
    kept_to = 0  # text before this offset is in `out` or replaced
    marker = json.dumps(TOO_DEEP)
    for token in _TOKEN.finditer(text):
        char = token.group()[0]
        if char == '"':
            continue
        if char in "[{":
            level += 1
            if level == depth + 1 and cut_from < 0:
                cut_from = token.start()
        else:
            level -= 1
            if level == depth and cut_from >= 0:
                out.append(text[kept_to:cut_from])
                out.append(marker)
                kept_to = token.end()
                cut_from = -1
    out.append(text[kept_to:])
    return "".join(out)
