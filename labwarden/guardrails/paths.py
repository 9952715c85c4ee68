"""Path arguments: resolved (symlinks followed) and contained by path component.

`/srv/fw-evil` is not inside `/srv/fw` (a string prefix check would say it is); a symlink inside
an allowed root that points outside it is outside.
"""

from __future__ import annotations

from pathlib import Path


class PathRefused(ValueError):
    pass


def contained(raw: str, roots: list[Path]) -> Path:
    """The resolved path if it lies inside one of `roots` (also resolved), else PathRefused."""
    if not raw or "\x00" in raw or any(ord(c) < 32 for c in raw):
        raise PathRefused(f"{raw!r}: empty or contains control characters")
    path = Path(raw).expanduser()
    resolved = path.resolve(strict=False)
    for root in roots:
        base = root.expanduser().resolve(strict=False)
        if resolved == base or base in resolved.parents:  # component-wise, not a string prefix
            return resolved
    allowed = ", ".join(str(r) for r in roots) or "(none configured)"
    raise PathRefused(f"{raw!r} resolves to {resolved}, outside the allowed roots: {allowed}")
