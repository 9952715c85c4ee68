"""String arguments from a model are data: they reach only argv lists, never a shell. The guard
still refuses what has no business in an identifier -- control characters, a leading dash (an
option smuggled into argv), shell metacharacters -- so a surprising value stops at the door."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}")


def problems(args: Any, path: str = "", path_fields: Collection[str] = ()) -> list[str]:
    """Every string in `args` (recursively) that is not a safe identifier, named by its field.
    Items of `path_fields` (the spec's `path_args`) may hold '/': guardrails.paths contains them."""
    out: list[str] = []
    if isinstance(args, dict):
        for k, v in args.items():
            if not isinstance(k, str) or not _IDENT.fullmatch(k):
                out.append(f"{path}{k!r}: field names are identifiers")
                continue
            out += problems(v, f"{path}{k}.", path_fields)
    elif isinstance(args, list):
        for i, v in enumerate(args):
            out += problems(v, f"{path}{i}.", path_fields)
    elif isinstance(args, str):
        field = path.rstrip(".")
        top = field.split(".")[0]
        if any(ord(c) < 32 or ord(c) == 127 for c in args):
            out.append(f"{field}: control characters are not allowed")
        elif args.startswith("-"):
            out.append(f"{field}: a leading '-' could be read as an option")
        elif top in path_fields and "/" in args:
            pass  # a path: contained by guardrails.paths
        elif not _IDENT.fullmatch(args):
            out.append(f"{field}: {args[:40]!r} is not an identifier (letters, digits, _ . : @ + -)")
    return out
