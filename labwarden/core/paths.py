"""Identifiers that become paths: each kind has one root, and a path made from an identifier is
resolved (every symlink followed) and must lie inside that root, by path component.

The one function every store calls (records, artifacts, reports, flame graphs, patches, session
anchors, and any store added later): `within(root, *names)` for names that come from a caller,
`contained(raw, roots)` for a whole path a caller passed. Neither ever resolves against the
working directory, and an over-long name is a refusal, not an OSError from the filesystem.

`/srv/fw-evil` is not inside `/srv/fw` (a string prefix would say it is); a symlink inside a root
that points outside it is outside; `a/../../b` is judged after normalisation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from labwarden.core.errors import LabError

MAX_NAME = 128
"""Longest name component accepted from a caller (filesystems stop at 255 bytes; labwarden's
identifiers are far shorter). Longer is refused before the filesystem is asked."""
MAX_PATH = 1024
"""Longest whole path accepted from a caller (PATH_MAX is 4096 here)."""
_NAME = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_.:@+-]*")
"""A plain name: no separator, no leading dot or dash, no control character, no space."""


class PathRefused(LabError):
    """A path made from an identifier lies outside its root, or the identifier cannot be a name."""

    kind = "refused"

    def __init__(self, problem: str, remedy: str = "use an identifier the lab gave you (a record "
                 "id, a patch id, a file name it listed); paths outside the lab's roots are "
                 "refused") -> None:
        super().__init__(problem, remedy, code="unsafe_path")


def check_name(name: str, what: str = "name") -> str:
    """`name` if it is one plain path component of sane length; PathRefused otherwise."""
    if not isinstance(name, str) or not name:
        raise PathRefused(f"{what}: empty")
    if len(name) > MAX_NAME or len(name.encode()) > MAX_NAME:
        raise PathRefused(f"{what}: {len(name.encode())} bytes, longer than {MAX_NAME}")
    if name in (".", "..") or not _NAME.fullmatch(name):
        raise PathRefused(f"{what}: {name[:60]!r} is not a plain name (letters, digits, _ . : @ "
                          "+ -; no '/', no leading '.' or '-')")
    return name


def _real(path: str) -> str:
    """realpath with every symlink followed. A missing tail is fine (a file about to be written);
    a symlink loop, an over-long or otherwise unresolvable name is a refusal, never an OSError."""
    try:
        return os.path.realpath(path, strict=True)
    except FileNotFoundError:
        pass
    except (OSError, RuntimeError, ValueError) as exc:
        raise PathRefused(f"{path[:80]!r} cannot be resolved: {type(exc).__name__}") from None
    try:
        return os.path.realpath(path, strict=False)
    except (OSError, RuntimeError, ValueError) as exc:
        raise PathRefused(f"{path[:80]!r} cannot be resolved: {type(exc).__name__}") from None


def _inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def root_of(root: Path | str) -> str:
    """A root, resolved. Roots come from the lab profile (which makes them absolute against its
    own directory), never from a caller."""
    return _real(os.path.abspath(os.path.expanduser(os.fspath(root))))


def within(root: Path | str, *names: str, what: str = "name") -> Path:
    """`root/names...` resolved, if it lies inside `root` (resolved); each name must be one
    plain component. PathRefused otherwise. The file need not exist."""
    base = root_of(root)
    for name in names:
        check_name(name, what)
    real = _real(os.path.join(base, *names))
    if not _inside(real, base):
        raise PathRefused(f"{what}: {'/'.join(names)[:80]!r} leads outside {base} (a symlink)")
    return Path(real)


def contained(raw: str, roots: Sequence[Path | str], what: str = "path") -> Path:
    """The absolute path `raw`, resolved, if it lies inside one of `roots`; PathRefused
    otherwise. A relative path is refused: nothing is ever looked up in the working directory."""
    if not isinstance(raw, str) or not raw:
        raise PathRefused(f"{what}: empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise PathRefused(f"{what}: {raw[:60]!r} contains control characters")
    if len(raw.encode()) > MAX_PATH:
        raise PathRefused(f"{what}: {len(raw.encode())} bytes, longer than {MAX_PATH}")
    if any(len(part.encode()) > 255 for part in raw.split("/")):
        raise PathRefused(f"{what}: a component of {raw[:60]!r}... is longer than 255 bytes")
    if not os.path.isabs(raw):
        raise PathRefused(f"{what}: {raw[:80]!r} is not absolute (nothing is looked up in the "
                          "working directory)")
    real = _real(raw)
    bases = [root_of(r) for r in roots]
    for base in bases:
        if _inside(real, base):
            return Path(real)
    allowed = ", ".join(bases) or "(none configured)"
    raise PathRefused(f"{what}: {raw[:80]!r} resolves to {real[:120]}, outside the allowed roots: "
                      f"{allowed}")


def is_regular_file(path: Path) -> bool:
    """`path.is_file()` that answers False (never raises) for any name the OS refuses."""
    try:
        return path.is_file()
    except OSError:
        return False
