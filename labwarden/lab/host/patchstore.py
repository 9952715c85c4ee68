"""Submitted patches: unified diffs written by an agent, checked and stored content-addressed.

A diff is data: it only ever reaches `git apply` (here in a scratch index, in the builder in a
clean worktree), never a shell. Which files it changes is what git says once it is applied --
every form git accepts counts (binary hunks, any prefix, quoted names, modes, renames, copies,
symlinks) -- not what its headers appear to name; a protected one refuses it. A stored patch
is `<data>/patches/<id>.patch` beside `<id>.json` (who submitted
it, on which base); its id is `<name>-<sha256 prefix>` of the diff and its base (the base
commit and base patches), so the same diff under the same name on the same base is the same
patch -- on another base, another (ids stored before the base counted hash the diff alone, and
keep resolving) -- and `build` finds it by id like a shipped one.

A submitted patch belongs to the principal that submitted it (core/principals.py, the rule
transcripts follow): another principal can neither list it, read it, build it, experiment on it,
nor search the tree a build of it committed -- to them it does not exist -- unless it was
submitted `shared`. A principal that submits the same diff under the same name holds it too
(it already has the content); the author's session stays theirs alone.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.core.paths import PathRefused, is_regular_file, within
from labwarden.core.principals import may_read
from labwarden.lab.config import LabProfile
from labwarden.lab.host import sourcetree
from labwarden.lab.host.builder import BuildError, resolve_patch

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
PATCH_ID = re.compile(r"([a-z0-9][a-z0-9_-]{0,39})-([0-9a-f]{10})")
MAX_DIFF_BYTES = 200_000


class PatchError(LabError):
    kind = "invalid_input"


class ProtectedPath(LabError):
    """A diff touches a path the lab profile protects."""

    kind = "refused"

    def __init__(self, paths: list[str], globs: list[str]):
        self.paths = paths
        super().__init__(
            f"the patch touches protected path(s): {', '.join(paths)} (the profile's [build] "
            f"protected = {globs})",
            "a patch must fix the daemon, not change the monitor, the load side or the "
            "measurement: leave these files alone", code="protected_path", lines=paths)


class ProtectedArtifact(LabError):
    """A patch changes the code of an output the lab profile protects, by whatever route."""

    kind = "refused"

    def __init__(self, outputs: list[str], which: str):
        super().__init__(
            f"{which} changes protected build output(s) {', '.join(outputs)} (the profile's "
            "[build] protected_artifacts): built with and without it, their code differs",
            "a patch must fix the daemon, not change the monitor or the load side -- through "
            "their sources, a header they include or the rules that build them",
            code="protected_path", lines=outputs)


class PatchMeta(BaseModel):
    id: str
    name: str
    sha256: str
    files: list[str] = Field(description="paths the diff touches")
    ref: str = Field(description="the ref it was checked against")
    base_commit: str
    base_patches: list[str] = Field(default_factory=list)
    build_id: str | None = Field(None, description="base + this patch, compiled")
    author: str | None = Field(None, description="the transcript session that submitted it "
                               "(shown only to its own principal)")
    principal: str | None = Field(None, description="who that session belonged to")
    shared: bool = Field(False, description="visible to every principal (submitted with "
                         "`shared: true`); else to its submitters' principals only")
    submitters: list[str] = Field(default_factory=list, description="other principals that "
                                  "submitted the same diff under the same name (each holds it)")
    summary: str | None = None
    submitted_at: datetime


def _path(raw: str) -> str | None:
    """The repository path of a diff header's file name (None for /dev/null)."""
    name = raw.strip().split("\t")[0]
    if name.startswith('"'):
        raise PatchError(f"diff: quoted file name {name!r} (unusual characters)",
                         "use plain file names")
    if name == "/dev/null":
        return None
    if name[:2] in ("a/", "b/"):
        name = name[2:]
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or ".." in pure.parts or any(ord(c) < 32 for c in name):
        raise PatchError(f"diff: file name {name!r} is absolute or climbs out with '..'",
                         "name files relative to the repository root (a/hal.c, b/hal.c)")
    return pure.as_posix()


def diff_paths(diff: str) -> list[str]:
    """Every path a unified diff touches (old and new names), in order of appearance."""
    if len(diff.encode()) > MAX_DIFF_BYTES:
        raise PatchError(f"diff: {len(diff.encode())} bytes (limit {MAX_DIFF_BYTES})",
                         "submit smaller patches, one change each")
    out: list[str] = []
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            parts = line[len("diff --git "):].split(" ")
            names = [_path(p) for p in parts if p[:2] in ("a/", "b/")]
        elif line.startswith(("--- ", "+++ ")):
            names = [_path(line[4:])]
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            names = [_path(line.split(" ", 2)[2])]
        else:
            continue
        for n in names:
            if n and n not in out:
                out.append(n)
    if not out or not re.search(r"^@@ ", diff, re.M):
        raise PatchError("diff: not a unified diff (no '--- a/FILE', '+++ b/FILE' and '@@' hunk)",
                         "send the output of `git diff` or `diff -u`, with a/ and b/ prefixes")
    return out


def changed_paths(repo: Path, base: str, applied_first: list[bytes], diff: bytes,
                  name: str = "diff") -> list[str]:
    """Every path `diff` changes once git applies it on commit `base` + `applied_first` (in a
    scratch index: no checkout, nothing written to the repository but blobs): content, mode,
    type (a symlink), creation and deletion; a rename or copy names both paths. Raises
    BuildError with git's lines when it does not apply (as the build would)."""
    with tempfile.TemporaryDirectory(prefix="lw-apply-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}

        def git(*args: str, data: bytes | None = None) -> str:
            res = subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True,
                                 env=env)
            if res.returncode != 0:
                lines = res.stderr.decode(errors="replace").strip().splitlines()[-20:]
                raise BuildError(f"patch {name}", lines, f"rebase {name} on {base[:12]} + the "
                                 "base patches (it does not apply)")
            return res.stdout.decode(errors="surrogateescape")

        git("read-tree", base)
        for earlier in applied_first:
            git("apply", "--cached", "-", data=earlier)
        before = git("write-tree").strip()
        git("apply", "--cached", "-", data=diff)
        after = git("write-tree").strip()
        raw = git("diff-tree", "-r", "-z", "--no-renames", "--raw", before, after)
    # -z --raw: ":<modes> <shas> <status>\0<path>\0" per change (one path: renames are off)
    fields = raw.split("\0")
    return sorted({path for meta, path in zip(fields[::2], fields[1::2], strict=False)
                   if meta.startswith(":")})


def protected(paths: list[str], globs: list[str]) -> list[str]:
    """The paths a glob of the profile protects (matched on the path and on the file name)."""
    return [p for p in paths
            if any(fnmatch.fnmatch(p, g) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], g) for g in globs)]


def normalized(diff: str) -> bytes:
    return (diff if diff.endswith("\n") else diff + "\n").encode()


def patch_id(name: str, diff: str, base: tuple[str, Sequence[str]] | None = None) -> tuple[str, str]:
    """(id, sha256 of the diff). `base`: (the base commit, the base patches) it is submitted on --
    hashed into the id with the diff, so the same diff on two bases is two patches (two builds,
    two records). Without it, the form ids had before the base counted (the diff alone): stored
    patches and records keep their ids -- an id is a file name, resolved as it is."""
    if not NAME.fullmatch(name):
        raise PatchError(f"name: {name!r} is not a patch name",
                         "lower-case letters, digits, '-' and '_', at most 40, e.g. bulk-pull")
    sha = hashlib.sha256(normalized(diff)).hexdigest()
    if base is None:
        return f"{name}-{sha[:10]}", sha
    commit, patches = base
    key = hashlib.sha256("\n".join(["labwarden patch on a base", sha, commit, *patches]).encode())
    return f"{name}-{key.hexdigest()[:10]}", sha


def base_of(repo: Path, ref: str, base_patches: Sequence[str]) -> tuple[str, list[str]]:
    """The base `patch_id` hashes: `ref` resolved to its commit (HEAD moves; a commit does not),
    and the base patches in order. Raises SourceError for a ref the repo lacks."""
    return sourcetree.resolve_commit(repo.expanduser(), ref), list(base_patches)


class PatchStore:
    def __init__(self, root: Path):
        self.root = root

    def path(self, pid: str) -> Path:
        return self.root / f"{pid}.patch"

    def _stored(self, name: str) -> Path | None:
        """A stored file, resolved inside the store (a symlink planted here that leads out, or
        dangles, is no stored file)."""
        try:
            path = within(self.root, name, what="patch id")
        except PathRefused:
            return None
        return path if is_regular_file(path) else None

    def meta(self, pid: str) -> PatchMeta | None:
        if not PATCH_ID.fullmatch(pid):
            return None
        path = self._stored(f"{pid}.json")
        if path is None:
            return None
        try:
            return PatchMeta.model_validate_json(path.read_text())
        except ValueError:  # not a meta file this labwarden wrote
            return None

    def diff(self, pid: str) -> str | None:
        path = self._stored(f"{pid}.patch") if PATCH_ID.fullmatch(pid) else None
        return path.read_text(errors="replace") if path is not None else None

    @staticmethod
    def shown(meta: PatchMeta, principal: str | None) -> PatchMeta:
        """The meta as a client of `principal` may see it: another principal's session id
        (the author), and who else holds it, are not theirs to know."""
        if meta.principal is not None and meta.principal == principal:
            return meta
        return meta.model_copy(update={"author": None, "principal": None, "submitters": []})

    @staticmethod
    def visible(meta: PatchMeta, reader: str | None) -> bool:
        """Whether a session acting for `reader` may see (list, read, build) the patch."""
        return meta.shared or any(may_read(reader, owner)
                                  for owner in [meta.principal, *meta.submitters])

    def seen(self, reader: str | None) -> list[PatchMeta]:
        """The stored patches `reader` may see, oldest first."""
        return [m for m in self.all() if self.visible(m, reader)]

    def hidden(self, ref: str, roots: list[Path], reader: str | None) -> bool:
        """Whether `ref` -- a patch id or path, as `build` resolves it among `roots` -- names a
        patch of this store `reader` may not see (one without its record -- put there by hand, or still
        being submitted -- is nobody's: only this host's own principals see it)."""
        if reader is None:
            return False
        try:
            path = resolve_patch(ref, roots).path.resolve()
        except (LabError, OSError, ValueError):  # ValueError: a NUL in it
            return False  # not a patch at all: the guard or the tool says so
        root = self.root.resolve()
        if root not in path.parents:
            return False  # a shipped patch
        meta = self.meta(path.stem) if path.parent == root else None
        if meta is None:  # a file put there by hand (or one being submitted): nobody's, which
            return not may_read(reader, None)  # this host's own principals may read
        return not self.visible(meta, reader)

    def check(self, field: str, refs: list[str], roots: list[Path], reader: str | None, *,
              unknown: bool = False) -> None:
        """Refuse (as an unknown patch: another principal's does not exist for `reader`) the
        first of `refs` that names a patch `reader` may not see; `unknown`: a patch id that names
        no patch at all too (the builder's own message would list every stored name)."""
        for ref in refs:
            missing = unknown and "/" not in ref and self._unresolved(ref, roots)
            if missing or self.hidden(ref, roots, reader):
                raise PatchError(f"{field}: unknown patch {ref[:64]!r}",
                                 self.lookup_remedy(roots, reader) + "; patch_submit stores new ones")

    @staticmethod
    def _unresolved(ref: str, roots: list[Path]) -> bool:
        try:
            resolve_patch(ref, roots)
        except BuildError:
            return True
        except (LabError, OSError, ValueError):
            return False  # not a patch id at all: the guard refuses it
        return False

    def lookup_remedy(self, roots: list[Path], reader: str | None) -> str:
        """The builder's remedy for an unknown patch id, naming only what `reader` may use: the
        shipped patches and the submitted ones it sees."""
        root = self.root.resolve()
        shipped = sorted({p.name.split("-")[0].removesuffix(".patch") for d in roots
                          if d.resolve() != root for p in d.glob("*.patch")})
        known = [*shipped, *(m.id for m in self.seen(reader)[-8:])]
        return (f"use a patch id ({', '.join(known) or 'none stored'}) or the absolute path of a "
                ".patch file in the lab's patch directories")

    def hidden_commit(self, repo: Path, commit: str, reader: str | None) -> bool:
        """Whether `commit` is a build's commit -- the builder commits `apply NAME.patch ...`
        on the base -- whose tree holds a patch `reader` may not see (that commit, or a build
        commit it was built on), and the firmware's own history (its branches and tags) does not
        hold it."""
        if reader is None:
            return False
        log = subprocess.run(["git", "-C", str(repo), "log", "-n", "16", "--first-parent",
                              "--format=%s", commit], capture_output=True, text=True)
        hidden = False
        for subject in log.stdout.splitlines() if log.returncode == 0 else []:
            if not subject.startswith("apply "):
                break  # below the builds: the base
            for name in subject.removeprefix("apply ").split():
                stem = name.removesuffix(".patch")
                if not PATCH_ID.fullmatch(stem):
                    continue  # a shipped patch
                meta = self.meta(stem)  # None: a submission that never got stored (nobody's)
                hidden = hidden or meta is None or not self.visible(meta, reader)
        if not hidden:
            return False
        refs = subprocess.run(["git", "-C", str(repo), "for-each-ref", "--count=1",
                               "--format=%(refname)", "--contains", commit],
                              capture_output=True, text=True)
        return not (refs.returncode == 0 and refs.stdout.strip())  # else: the firmware's history

    def pending(self, pid: str, diff: str) -> Path:
        """Where a diff waits while it is checked: under its final name (builds record patch
        file names), in a directory no patch id resolves to."""
        d = self.root / ".pending"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{pid}.patch"
        path.write_bytes(normalized(diff))
        return path

    def store(self, pending: Path, meta: PatchMeta) -> None:
        """Move a checked diff in place; the meta file is written last (it marks complete)."""
        pending.replace(self.path(meta.id))
        self.update(meta)

    def update(self, meta: PatchMeta) -> None:
        """Rewrite a stored patch's meta (who holds it, shared), atomically."""
        tmp = self.root / f".{meta.id}.{os.getpid()}.json"
        tmp.write_text(meta.model_dump_json(indent=1))
        tmp.replace(self.root / f"{meta.id}.json")

    def all(self) -> list[PatchMeta]:
        metas = []
        for f in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            m = self.meta(f.stem)
            if m is not None:
                metas.append(m)
        return sorted(metas, key=lambda m: m.submitted_at)


def now() -> datetime:
    return datetime.now(UTC)


def lab_patches(data_dir: Path) -> PatchStore:
    """The patches submitted to a lab (its data dir's `patches/`), where patch_submit writes and
    experiment reads them."""
    return PatchStore(data_dir / "patches")


def check_ref(profile: LabProfile, data_dir: Path, field: str, ref: str | None,
              reader: str | None) -> None:
    """Refuse `ref` for a session acting for `reader` when it names a build's commit that applied
    another principal's patch (building, bisecting or reading that commit is that patch): answered
    as a ref the repo does not have. Any other ref is left to the tool."""
    if reader is None or not ref or ref.startswith("-") or any(ord(c) < 32 for c in ref):
        return  # not a ref: the guard (it runs after this check) or the tool refuses it
    repo = Path(profile.build.repo).expanduser()
    try:
        found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q",
                                f"{ref}^{{commit}}"], capture_output=True, text=True)
    except (OSError, ValueError):
        return
    if found.returncode != 0:
        return
    if lab_patches(data_dir).hidden_commit(repo, found.stdout.strip(), reader):
        raise sourcetree.SourceError(f"{field}: no commit {ref[:100]!r} in {repo}",
                                     "use HEAD, a branch or a commit hash of the firmware repo")


def lab_tree(profile: LabProfile, data_dir: Path, ref: str, reader: str | None) -> tuple[str, Path]:
    """sourcetree.lab_tree for a session acting for `reader`: a build's commit that applied
    another principal's patch is no commit for it (its tree is that patch), answered as a ref
    the repo does not have."""
    check_ref(profile, data_dir, "ref", ref, reader)
    return sourcetree.lab_tree(profile.build.repo, data_dir, ref)
