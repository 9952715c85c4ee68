"""Random ids for call records and events: unique, not secret (the transcript's hash chain, not
its ids, protects it). Drawn from a process-local generator the OS seeds (reseeded in a forked
child), so an id costs no system call: os.urandom releases the GIL, and under the MCP SDK's
threaded stdio transport every release is a thread handoff in the middle of a tool call
(bench/tool_overhead.py). Session ids, which name files, keep `secrets`."""

from __future__ import annotations

import os
import random

_rng = random.Random()  # seeded from os.urandom
os.register_at_fork(after_in_child=_rng.seed)


def random_hex(nbytes: int) -> str:
    """`nbytes` random bytes as hex (64 bits for an event: as many as uuid4().hex[:16])."""
    return _rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()
