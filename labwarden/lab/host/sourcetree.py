"""The firmware sources at a ref, read-only: a tree extracted once per commit (`git archive`),
searched with ripgrep when it is installed (a Python fallback otherwise), read by line range.

Paths from a caller are relative to the tree and contained in it by component after every
symlink is followed: an absolute path, `..`, or a symlink that leads out is refused.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError

MAX_FILE_BYTES = 2 << 20
"""Files larger than this are not searched (generated data, blobs)."""
MAX_LINE = 240
"""Characters of a line shown; longer lines are cut (and say so)."""
SEARCH_SECONDS = 10.0


class SourceError(LabError):
    kind = "invalid_input"


class Hit(BaseModel):
    path: str = Field(description="relative to the repository root")
    line: int = Field(description="1-based")
    text: str
    before: list[str] = Field(default_factory=list, description="context lines above")
    after: list[str] = Field(default_factory=list, description="context lines below")


def resolve_commit(repo: Path, ref: str) -> str:
    """The commit a ref names, or SourceError naming the ref."""
    if not ref or ref.startswith("-"):
        raise SourceError(f"ref: {ref!r} is not a ref", "use a branch, a tag or a commit hash "
                          "(e.g. HEAD)")
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q",
                          f"{ref}^{{commit}}"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SourceError(f"ref: no commit {ref!r} in {repo}",
                          "use HEAD, a branch or a commit hash of the firmware repo")
    return out.stdout.strip()


def tree_at(repo: Path, ref: str, cache: Path) -> tuple[str, Path]:
    """(commit, directory holding the files of that commit); extracted once per commit."""
    commit = resolve_commit(repo, ref)
    root = cache / commit
    if root.is_dir():
        return commit, root
    cache.mkdir(parents=True, exist_ok=True)
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                          capture_output=True, check=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=cache))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter=_in_tree)
    try:
        tmp.rename(root)
    except OSError:  # another call extracted it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return commit, root


def lab_tree(repo: str, data_dir: Path, ref: str) -> tuple[str, Path]:
    """A lab's firmware tree at `ref` (`repo`: the profile's build repo), cached under its data
    dir: what source_search and source_read read."""
    return tree_at(Path(repo).expanduser(), ref, data_dir / "source")


def _in_tree(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter (no absolute names, no device files, no links out of the tree),
    except that a member it refuses is left out instead of failing the whole tree."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def inside(root: Path, rel: str) -> Path:
    """`rel` resolved inside `root`, or SourceError: relative, no `..`, no symlink out."""
    if not rel or "\x00" in rel or any(ord(c) < 32 for c in rel):
        raise SourceError(f"path: {rel!r} is empty or holds control characters",
                          "give a path relative to the repository root, e.g. hal.c")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts:
        raise SourceError(f"path: {rel!r} is absolute or climbs out with '..'",
                          "give a path relative to the repository root, e.g. hal.c")
    base = root.resolve()
    path = (base / pure).resolve()
    if path != base and base not in path.parents:
        raise SourceError(f"path: {rel!r} leads out of the repository (a symlink)",
                          "read files inside the repository only")
    return path


def files(root: Path, glob: str | None) -> list[str]:
    """Relative paths of the tree's regular files (sorted), optionally matching a glob."""
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        for name in sorted(names):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink() or not full.is_file():
                continue
            if glob and not (fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(name, glob)):
                continue
            out.append(rel)
    return out


def _cut(line: str) -> str:
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + " [...cut]"


def _context(lines: list[str], i: int, context: int) -> tuple[list[str], list[str]]:
    return ([_cut(x) for x in lines[max(0, i - context):i]],
            [_cut(x) for x in lines[i + 1:i + 1 + context]])


def search_python(root: Path, pattern: str, glob: str | None, context: int) -> list[Hit]:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise SourceError(f"pattern: not a valid regular expression: {exc}",
                          "escape special characters, e.g. 'hal_get\\(' ") from None
    hits: list[Hit] = []
    deadline = time.monotonic() + SEARCH_SECONDS
    for rel in files(root, glob):
        path = root / rel
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        raw = path.read_bytes()
        if b"\x00" in raw[:8192]:
            continue  # binary
        lines = raw.decode(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if rx.search(line):
                before, after = _context(lines, i, context)
                hits.append(Hit(path=rel, line=i + 1, text=_cut(line), before=before, after=after))
        if time.monotonic() > deadline:
            raise SourceError(f"pattern: the search took over {SEARCH_SECONDS:g} s",
                              "use a simpler pattern or a path_glob")
    return hits


def search_ripgrep(rg: str, root: Path, pattern: str, glob: str | None, context: int) -> list[Hit]:
    argv = [rg, "--json", "--no-config", "--hidden", "--max-filesize", str(MAX_FILE_BYTES),
            "-e", pattern]
    if glob:
        argv += ["-g", glob]
    try:
        out = subprocess.run([*argv, "--", "."], cwd=root, capture_output=True, text=True,
                             timeout=SEARCH_SECONDS)
    except subprocess.TimeoutExpired:
        raise SourceError(f"pattern: the search took over {SEARCH_SECONDS:g} s and was stopped",
                          "use a simpler pattern or a path_glob") from None
    if out.returncode == 2:
        raise SourceError(f"pattern: ripgrep refused it: {out.stderr.strip()[-200:]}",
                          "escape special characters, e.g. 'hal_get\\(' ")
    hits: list[Hit] = []
    cache: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("type") != "match":
            continue
        data = msg["data"]
        rel = data["path"].get("text", "").removeprefix("./")
        if glob and not (fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob)):
            continue
        if rel not in cache:
            cache[rel] = (root / rel).read_text(errors="replace").splitlines()
        i = data["line_number"] - 1
        before, after = _context(cache[rel], i, context)
        hits.append(Hit(path=rel, line=i + 1, text=_cut(cache[rel][i]), before=before, after=after))
    return sorted(hits, key=lambda h: (h.path, h.line))


def ripgrep() -> str | None:
    """ripgrep's path, when it is installed."""
    return shutil.which("rg")


def search(root: Path, pattern: str, glob: str | None = None, context: int = 2,
           engine: str | None = None) -> tuple[list[Hit], str]:
    """Every hit, sorted by (path, line); and the engine used ('ripgrep' or 'python'). In this
    process: a server searches through tools/source_search (the fallback in a child process)."""
    rg = ripgrep() if engine in (None, "ripgrep") else None
    if rg is not None:
        return search_ripgrep(rg, root, pattern, glob, context), "ripgrep"
    return search_python(root, pattern, glob, context), "python"


def read_lines(root: Path, rel: str, start: int, end: int) -> tuple[list[str], int]:
    """Lines start..end (1-based, inclusive) of a file in the tree, and its line count."""
    path = inside(root, rel)
    if not path.is_file():
        near = [f for f in files(root, None) if f.rsplit("/", 1)[-1] == rel.rsplit("/", 1)[-1]]
        hint = f"did you mean {', '.join(near[:3])}?" if near else "check the spelling"
        raise SourceError(f"path: no file {rel!r} at this ref", f"source_search finds files; {hint}")
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise SourceError(f"path: {rel!r} is a binary file", "read text files only")
    lines = raw.decode(errors="replace").splitlines()
    return [_cut(x) for x in lines[start - 1:end]], len(lines)
