"""The `--lab` option and profile loading, shared by every command that opens a lab."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from labwarden.lab.config import LabProfile, ProfileError

DEFAULT_LAB = Path(os.environ.get("LABWARDEN_LAB", ".vlab/lab.toml"))
LabOpt = Annotated[Path, typer.Option("--lab", help="lab profile (TOML); default $LABWARDEN_LAB or "
                                      ".vlab/lab.toml")]


def load_profile(lab: Path, console: Console) -> LabProfile:
    """The profile, or its keyed errors printed and exit 2 (a usage error, like a bad option)."""
    try:
        return LabProfile.from_file(lab)
    except ProfileError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
