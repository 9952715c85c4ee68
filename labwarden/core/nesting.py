"""How deep a caller's arguments may nest, and the cut every door makes before it decodes JSON.

Decoders recurse, and break well below what a client can send: pydantic's JSON parser (the MCP
SDK's, on stdio and HTTP) refuses a message nested 200 levels deep -- over stdio the SDK then
answers nothing, not even an error -- pydantic_core's serializer gives up near 255 levels, and
Python's `json` raises RecursionError near 1000 (a 500 over HTTP). So each door cuts the JSON
text first (`clip_text`, `clip_bytes`: no recursion, linear in the text): a container opening
deeper than WIRE_DEPTH is replaced by a marker string naming how deep the message went; the
request then reaches the runner like any other, which refuses arguments deeper than MAX_DEPTH
(`too_deep`, with a transcript row) -- the marker is only deeper still. In-process callers
(Python, the agent) pass objects, checked by `too_deep` (no recursion either).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 32
"""Levels tool arguments may nest, the arguments object itself being the first (`{"a": [1]}` is
2). No tool's input nests deeper than 3 today; 32 leaves room for any schema a tool could grow,
and stays far below the 200 levels at which the first decoder (pydantic's JSON parser) breaks."""
WIRE_DEPTH = MAX_DEPTH + 8
"""Where a door cuts a whole message: the JSON-RPC envelope puts the arguments 2 levels down
(`params.arguments`), so arguments one level too deep still arrive whole and are refused by the
runner with their own depth; anything deeper than this never reaches a decoder."""

MARK = "$labwarden:nested-deeper-than-the-limit:"
"""The marker a cut leaves (ASCII: it replaces bytes in place), followed by the depth of the
whole message."""
_MARKED = re.compile(re.escape(MARK) + r"(\d+)")
# a JSON string (escapes included; an unterminated one runs to the end) or a bracket
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)


def clip_text(text: str, limit: int = WIRE_DEPTH) -> str:
    """`text` (JSON, possibly malformed) with every container that opens deeper than `limit`
    replaced by a marker string; `text` itself when nothing is that deep."""
    if text.count("[") + text.count("{") <= limit:  # cannot nest that deep: the common case
        return text
    depth = deepest = 0
    start: int | None = None
    cuts: list[tuple[int, int]] = []
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            continue
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if depth == limit + 1 and start is None:
                start = m.start()
        else:
            if depth == limit + 1 and start is not None:
                cuts.append((start, m.end()))
                start = None
            depth = max(0, depth - 1)
    if start is not None:  # never closed: cut to the end (the decoder then says it is malformed)
        cuts.append((start, len(text)))
    if not cuts:
        return text
    mark = f'"{MARK}{deepest}"'
    out, last = [], 0
    for a, b in cuts:
        out += [text[last:a], mark]
        last = b
    out.append(text[last:])
    return "".join(out)


def clip_bytes(body: bytes, limit: int = WIRE_DEPTH) -> bytes:
    """clip_text on bytes, leaving every other byte as it was (UTF-8 never uses the ASCII
    bytes of brackets, quotes and backslashes inside a multi-byte character)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return body
    return clip_text(body.decode("latin-1"), limit).encode("latin-1")


@dataclass(frozen=True)
class TooDeep:
    """Arguments nested past the limit: where (the top-level field) and how deep."""

    field: str
    depth: int
    """Levels of the arguments, or of the whole request when a door cut it."""
    cut: bool
    """A door cut the request (its marker was found)."""

    def reason(self, limit: int = MAX_DEPTH) -> str:
        how = f"the request nested {self.depth} levels and was cut at the door" if self.cut \
            else f"{self.depth} levels"
        return f"{self.field}: arguments nest deeper than the limit of {limit} levels ({how})"

    @staticmethod
    def remedy(limit: int = MAX_DEPTH) -> str:
        return (f"send the arguments the tool's input schema describes: no tool takes more than a "
                f"few levels, and {limit} is the limit (`labwarden call TOOL --help`)")


def too_deep(args: Any, limit: int = MAX_DEPTH) -> TooDeep | None:
    """Whether `args` nests deeper than `limit` (the object itself is level 1) or holds a door's
    cut marker; None when it does not. Iterative: any depth is safe to ask about."""
    stack: list[tuple[Any, int, str]] = [(args, 1, "(arguments)")]
    deepest, where = 0, "(arguments)"
    while stack:
        value, level, top = stack.pop()
        if isinstance(value, str):
            m = _MARKED.match(value)
            if m is not None:
                return TooDeep(top, int(m.group(1)), cut=True)
            continue
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, (list, tuple)):
            items = enumerate(value)
        else:
            continue
        if level > deepest:
            deepest, where = level, top
        for key, item in items:
            if isinstance(item, (dict, list, tuple, str)):
                stack.append((item, level + 1, str(key)[:64] if level == 1 else top))
    return TooDeep(where, deepest, cut=False) if deepest > limit else None


def clipped(args: Any, keep: int = 4) -> Any:
    """`args` as a transcript may store it: containers deeper than `keep` levels replaced by
    the marker (every serializer can then encode it). Recursion bounded by `keep`."""
    def cut(value: Any, level: int) -> Any:
        if isinstance(value, dict):
            if level > keep:
                return f"{MARK}{level}"
            return {str(k): cut(v, level + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if level > keep:
                return f"{MARK}{level}"
            return [cut(v, level + 1) for v in value]
        return value

    return cut(args, 1)
