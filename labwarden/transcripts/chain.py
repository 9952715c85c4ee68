"""The hash chain: each event's hash covers its canonical body and the previous event's hash."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

GENESIS = "0" * 64
"""The `prev_hash` of a session's first event."""


def canonical_json(event: BaseModel) -> str:
    """The stored body: JSON with sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(event.model_dump(mode="json"), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def link_hash(prev_hash: str, body: str) -> str:
    """sha256(prev_hash || body), hex."""
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()
