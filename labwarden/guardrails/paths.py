"""Path arguments: resolved (symlinks followed) and contained by path component, in the one
function every identifier-to-path lookup uses (labwarden/core/paths.py)."""

from __future__ import annotations

from labwarden.core.paths import PathRefused, contained, within

__all__ = ["PathRefused", "contained", "within"]
