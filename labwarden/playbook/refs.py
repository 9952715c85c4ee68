"""`${step.path}` references in step arguments, resolved against earlier results.

A whole-string reference keeps the value's type (a list stays a list); a reference inside a
longer string is interpolated. Paths: dots and [index] (negative allowed), e.g.
`${baseline.points[-1].profile_id}`, `${vars.window_s}`, `${lab.baseline}`.
Hand-written: JSONPath libraries are far larger than this one rule set.
"""

from __future__ import annotations

import re
from typing import Any

from labwarden.core.errors import LabError

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[-?\d+\])*)\}")
_PART = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(-?\d+)\]")


class RefError(LabError):
    """A `${step.path}` reference that names nothing (a failed step, a wrong path)."""

    kind = "invalid_input"

    def __init__(self, problem: str):
        super().__init__(problem, "a reference names a step that failed or a wrong path")


def lookup(scope: dict[str, Any], path: str) -> Any:
    value: Any = scope
    walked = ""
    for m in _PART.finditer(path):
        key, idx = m.group(1), m.group(2)
        try:
            value = value[key] if key is not None else value[int(idx)]
        except (KeyError, IndexError, TypeError):
            raise RefError(f"${{{path}}}: nothing at {walked + m.group(0)!r}") from None
        walked += m.group(0)
    return value


def resolve(value: Any, scope: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {k: resolve(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, scope) for v in value]
    if isinstance(value, str):
        whole = _REF.fullmatch(value)
        if whole:
            return lookup(scope, whole.group(1))
        return _REF.sub(lambda m: str(lookup(scope, m.group(1))), value)
    return value
