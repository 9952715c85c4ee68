"""Diffs written the way an attacker would: edit a clone of a lab's firmware repo (files, new
files, symlinks, modes, renames) and let git print the diff in any of its forms."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def git_diff(repo: Path, edit: Callable[[Path], None], *flags: str) -> str:
    """`git diff --cached FLAGS` of what `edit(tree)` did to a fresh clone of `repo`'s HEAD."""
    with tempfile.TemporaryDirectory(prefix="lw-diff-") as tmp:
        tree = Path(tmp) / "fw"
        subprocess.run(["git", "clone", "-q", str(repo), str(tree)], check=True)
        edit(tree)
        subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
        out = subprocess.run(["git", "-C", str(tree), "diff", "--cached", *flags],
                             check=True, capture_output=True, text=True)
        return out.stdout


def append(path: str, text: str) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        with (tree / path).open("a") as f:
            f.write(text)
    return edit


def prepend(path: str, text: str) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        (tree / path).write_text(text + (tree / path).read_text())
    return edit


def replace(path: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        body = (tree / path).read_text()
        assert old in body, f"{path} no longer holds {old!r}"
        (tree / path).write_text(body.replace(old, new, 1))
    return edit


def write(path: str, text: str, mode: int = 0o644) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        (tree / path).write_text(text)
        os.chmod(tree / path, mode)
    return edit


def symlink(path: str, target: str) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        os.symlink(target, tree / path)
    return edit


def both(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        for e in edits:
            e(tree)
    return edit
