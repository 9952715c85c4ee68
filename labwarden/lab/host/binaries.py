"""Host programs labwarden runs (perf, inferno): found on PATH, or in the project's own .tools/
where `make setup` installs inferno (cargo --root .tools)."""

from __future__ import annotations

import shutil
from pathlib import Path


def project_tools_bin() -> Path:
    """Where `make setup` installs inferno (cargo --root .tools)."""
    return Path(__file__).resolve().parents[3] / ".tools" / "bin"


def which(name: str) -> str | None:
    return shutil.which(name) or (
        str(p) if (p := project_tools_bin() / name).exists() else None)
