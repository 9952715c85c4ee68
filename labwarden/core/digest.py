"""What the transcript keeps of an argument a caller sent: the argument itself when it is small,
a bounded digest (size, sha256, the first characters) when it is not -- a refused call with a
10 MB argument must not grow the transcript by 10 MB (it grew by 60 MB for five of them)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic_core import to_json

ARG_CHARS = 2048
"""An argument whose JSON is longer is stored as its digest."""
ARGS_CHARS = 16384
"""Arguments whose JSON together is longer (or that have too many keys) are digested whole."""
MAX_KEYS = 32
HEAD_CHARS = 200
NAME_CHARS = 64
"""A tool name or URI from a caller is stored up to this long, with its digest beyond."""


def digest_of(text: str) -> dict[str, Any]:
    """{"$digest": {size, sha256, head}} of a text (size in characters)."""
    return {"$digest": {"size": len(text), "sha256": hashlib.sha256(text.encode("utf-8", "replace"))
                        .hexdigest(), "head": text[:HEAD_CHARS]}}


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def _surely_small(args: dict[str, Any]) -> bool:
    """Whether args are surely kept as they are: few keys, and JSON short enough that no value
    can reach ARG_CHARS (a value's JSON is part of the whole's). pydantic_core's encoder, ~20x
    faster than json.dumps: this runs on every tool call. Its UTF-8 bytes are never fewer
    than json.dumps' characters but for a number's spelling ("1.5e-7" for "1.5e-07"), so half the
    bound leaves a wide margin; anything larger takes the exact path."""
    try:
        return len(args) <= MAX_KEYS and len(to_json(args, fallback=str)) <= ARG_CHARS // 2
    except Exception:  # a value pydantic_core cannot encode: json.dumps decides
        return False


def bounded_args(args: Any) -> dict[str, Any]:
    """`args` as the transcript stores it: a dict whose values are each the argument or, for an
    oversized one, its digest; the whole thing digested when it is not a small dict."""
    if isinstance(args, dict) and _surely_small(args):
        return args
    if not isinstance(args, dict):
        return digest_of(_json(args)) if len(_json(args)) > ARG_CHARS else {"$value": args}
    whole = _json(args)
    if len(whole) <= ARGS_CHARS and len(args) <= MAX_KEYS:
        if all(len(_json(v)) <= ARG_CHARS for v in args.values()):
            return args
    if len(args) > MAX_KEYS or any(not isinstance(k, str) or len(k) > NAME_CHARS for k in args):
        return digest_of(whole)
    out = {k: (digest_of(_json(v)) if len(_json(v)) > ARG_CHARS else v) for k, v in args.items()}
    return out if len(_json(out)) <= ARGS_CHARS else digest_of(whole)


def bounded_name(name: str) -> str:
    """A caller-given name (a tool, a URI) fit to store and to quote in a message."""
    if len(name) <= NAME_CHARS:
        return name
    sha = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:16]
    return f"{name[:NAME_CHARS]}...[{len(name)} chars, sha256 {sha}]"
