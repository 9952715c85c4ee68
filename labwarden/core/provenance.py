"""Where labwarden itself came from: version, git commit and dirty flag of its checkout."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from labwarden import __version__

PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        res = subprocess.run(["git", "-C", str(PACKAGE_DIR), *args], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


@cache
def labwarden_provenance() -> tuple[str, str | None, bool | None]:
    """(version, git commit or None, dirty or None) -- None when not run from a git checkout."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return __version__, None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return __version__, commit, (bool(status) if status is not None else None)


def labwarden_version() -> str:
    """`version+commit12` (`-dirty` when the checkout has changes): stamped on every measurement."""
    version, commit, dirty = labwarden_provenance()
    return version + (f"+{commit[:12]}" if commit else "") + ("-dirty" if dirty else "")
