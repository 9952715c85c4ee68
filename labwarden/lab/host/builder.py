"""Build firmware from a git repo: one clean worktree per (ref, patches), content-addressed.

A build directory `builds/<build_id>/` holds
- `image.tar.gz`: deploy files, stripped, under `rootfs/` at their DUT paths (what flash sends);
- `symfs/`: for perf on the host -- each stripped file at its DUT path, and its debug info
  under `usr/lib/debug/.build-id/xx/rest.debug` (perf's layout: a mismatched build-id is refused);
- `manifest.json`: git hash, and per file its DUT path, sha256 and ELF build-id.
The build command and artifacts come from a `BuildRecipe` (the lab profile's [build] section).
A patch can change every file the build command reads, so the command runs confined
(lab/host/sandbox.py): it writes only the worktree and `out/`; git and the packaging run here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path

from elftools.common.exceptions import ELFError
from pydantic import BaseModel, Field

from labwarden.core.errors import ErrorKind, LabError
from labwarden.core.paths import check_name, contained, is_regular_file, within
from labwarden.lab import elfsym
from labwarden.lab.config import BuildSection
from labwarden.lab.host import sandbox

# Fixed identity and dates: the same sources and patches give the same commit on every machine.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "labwarden", "GIT_AUTHOR_EMAIL": "build@labwarden.invalid",
    "GIT_COMMITTER_NAME": "labwarden", "GIT_COMMITTER_EMAIL": "build@labwarden.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


class BuildError(LabError):
    """A patch that does not apply or code that does not compile; `lines` are the failing lines."""

    kind = "build"

    def __init__(self, stage: str, lines: list[str], remedy: str = "fix the lines above",
                 kind: ErrorKind | None = None):
        self.stage = stage
        super().__init__(f"{stage} failed", remedy, kind=kind, lines=lines)


class BuildRecipe(BaseModel):
    repo: Path = Field(description="git repository of the sources")
    builds: Path = Field(description="where build directories are kept")
    rootfs: str = Field(description="DUT path prefix where the image's rootfs/ lands ('/' on a real DUT)")
    command: list[str] = Field(description="argv run in the worktree; {out} {git_hash} {jobs} are filled in")
    artifacts: dict[str, str] = Field(description="output file (relative to {out}) -> path inside rootfs")
    extra_outputs: list[str] = Field(default_factory=list, description="outputs kept beside the image")
    patches_dirs: list[Path] = Field(default_factory=list, description="where patch ids are looked up")
    strip: str = Field("strip", description="the toolchain's strip ([build] strip); its objcopy "
                       "is the same name with objcopy for strip")
    limits: sandbox.Limits = Field(default_factory=sandbox.Limits,
                                   description="what the confined build command may spend and read")

    def objcopy(self) -> str:
        head, sep, _ = self.strip.rpartition("strip")
        return f"{head}objcopy" if sep else "objcopy"


class Artifact(BaseModel):
    name: str
    path: str = Field(description="absolute path on the DUT")
    sha256: str
    build_id: str = Field(description="ELF NT_GNU_BUILD_ID, hex")


class BuildManifest(BaseModel):
    build_id: str = Field(description="content address of (base commit, patches)")
    git_hash: str = Field(description="commit built (base + patches committed)")
    base: str
    patches: list[str]
    artifacts: list[Artifact]
    image: str
    symfs: str


def recipe_of(section: BuildSection, rootfs: str) -> BuildRecipe:
    """The recipe a lab profile's [build] section describes, for a DUT whose rootfs is `rootfs`."""
    return BuildRecipe(repo=Path(section.repo).expanduser(), builds=Path(section.builds).expanduser(),
                       rootfs=rootfs, command=section.command, artifacts=section.artifacts,
                       extra_outputs=section.extra_outputs,
                       patches_dirs=[Path(d).expanduser() for d in section.patches_dirs],
                       strip=section.strip,
                       limits=sandbox.Limits(timeout_s=section.timeout_s,
                                             memory_mb=section.memory_mb,
                                             max_procs=section.max_procs,
                                             disk_mb=section.disk_mb, tmp_mb=section.tmp_mb,
                                             log_mb=section.log_mb,
                                             readonly_paths=[Path(p).expanduser()
                                                             for p in section.readonly_paths]))


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                         env={**os.environ, **_GIT_ENV})
    if out.returncode != 0:
        raise BuildError(f"git {args[0]}", (out.stderr or out.stdout).strip().splitlines()[-20:],
                         "check the ref and the repository")
    return out.stdout.strip()


MAX_PATCH_BYTES = 16 << 20
"""A patch larger than this is refused (the vlab's are a few KiB)."""


class Patch(BaseModel):
    """A patch as applied: its file name and its bytes, read once (what is hashed is applied)."""

    name: str
    path: Path = Field(description="the file, resolved: inside one of the patch directories")
    data: bytes = Field(repr=False)


def resolve_patch(ref: str, patches_dirs: list[Path]) -> Patch:
    """A patch id ('0901') names `0901-*.patch` or `0901.patch` in one of `patches_dirs`; an
    absolute path must name a .patch/.diff file inside one of them. Every candidate is resolved
    (symlinks followed) and contained in its directory (core/paths.py); nothing is ever looked up
    in the working directory."""
    if "/" in ref:
        path = contained(ref, patches_dirs, what="patches")
        if path.suffix not in (".patch", ".diff") or not is_regular_file(path):
            raise BuildError("patch lookup", [f"{ref!r} is not a .patch or .diff file"],
                             "name a patch file inside the lab's patch directories")
        return _read_patch(path)
    check_name(ref, "patches")
    for d in patches_dirs:
        names = [*sorted(p.name for p in d.glob(f"{ref}-*.patch")), f"{ref}.patch"]
        for name in names:
            if (d / name).is_symlink() or (d / name).exists():
                path = within(d, name, what="patches")  # a symlink out of the dir: refused
                if is_regular_file(path):
                    return _read_patch(path)
    known = sorted({p.name.split("-")[0].removesuffix(".patch")
                    for d in patches_dirs for p in d.glob("*.patch")})
    raise BuildError("patch lookup", [f"unknown patch {ref!r}"],
                     f"use a patch id ({', '.join(known) or 'none stored'}) or the absolute path "
                     "of a .patch file in the lab's patch directories")


def _read_patch(path: Path) -> Patch:
    size = path.stat().st_size
    if size > MAX_PATCH_BYTES:
        raise BuildError("patch lookup", [f"{path.name} is {size} bytes"],
                         f"patches are at most {MAX_PATCH_BYTES >> 20} MiB")
    return Patch(name=path.name, path=path, data=path.read_bytes())


def build_key(base: str, patches: list[Patch], recipe: BuildRecipe) -> str:
    h = hashlib.sha256(base.encode())
    h.update(repr((recipe.command, sorted(recipe.artifacts.items()), recipe.rootfs)).encode())
    for p in patches:
        h.update(b"\0" + hashlib.sha256(p.data).digest())
    return h.hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _remove_worktree(repo: Path, tree: Path) -> None:
    # removed as files, not by `git worktree remove`: the confined build owned the tree, and
    # git refuses to open a repository another uid owns
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def build(recipe: BuildRecipe, patches: list[str] | None = None, ref: str = "HEAD",
          progress: Callable[[str], None] = lambda _m: None,
          stop: threading.Event | None = None) -> tuple[BuildManifest, bool]:
    """Build (ref + patches); returns (manifest, cached). Raises BuildError with failing lines.
    `stop` set (the caller was cancelled: the session's wall time) ends the build command."""
    patch_files = [resolve_patch(p, recipe.patches_dirs) for p in (patches or [])]
    base = git(recipe.repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    key = build_key(base, patch_files, recipe)
    out = recipe.builds / key
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        return BuildManifest.model_validate_json(manifest_path.read_text()), True
    tree = out / "tree"
    if out.exists():  # a half-finished earlier attempt: start clean
        _remove_worktree(recipe.repo, tree)
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        progress("checking out a clean worktree")
        git(recipe.repo, "worktree", "add", "-q", "--detach", str(tree), base)
        for pf in patch_files:
            progress(f"applying {pf.name}")
            # the bytes that were hashed are the bytes applied (no second read of the file)
            applied = subprocess.run(["git", "-C", str(tree), "apply", "--index", "-"],
                                     input=pf.data, capture_output=True)
            if applied.returncode != 0:
                raise BuildError(f"patch {pf.name}",
                                 applied.stderr.decode(errors="replace").strip().splitlines()[-20:],
                                 f"rebase {pf.name} on {base[:12]} (it does not apply)")
        if patch_files:
            git(tree, "commit", "-q", "-m", "apply " + " ".join(p.name for p in patch_files))
        git_hash = git(tree, "rev-parse", "HEAD")
        fill = {"out": sandbox.OUT, "git_hash": git_hash, "jobs": str(os.cpu_count() or 1)}
        argv = [arg.format(**fill) for arg in recipe.command]
        (out / "out").mkdir()
        progress("compiling (confined): " + " ".join(argv[:3]) + (" ..." if len(argv) > 3 else ""))
        res = sandbox.run(argv, tree=tree, out=out / "out", limits=recipe.limits,
                          log=out / "build.log", stop=stop)
        if res.stopped:
            raise BuildError("compile", [f"stopped after {res.duration_s:g} s"],
                             "the session's wall time ran out; its processes were killed",
                             kind="timeout")
        if res.timed_out:
            raise BuildError("compile", [f"ran past [build] timeout_s = "
                                         f"{recipe.limits.timeout_s:g} s; its processes were killed"],
                             "make the build faster, or raise [build] timeout_s", kind="timeout")
        if res.returncode != 0 and res.limits_hit:  # refused by a limit: which, and its key
            tail = [ln for ln in res.output.splitlines() if ln.strip()][-10:]
            raise BuildError("compile", [h.line for h in res.limits_hit] + tail,
                             "; ".join(h.remedy for h in res.limits_hit))
        if res.returncode != 0:
            lines = res.output.splitlines()
            # the compiler's error lines; when only make's own summary says "Error", the tail
            errors = [ln for ln in lines if "error" in ln.lower() and not ln.startswith("make")] \
                or lines
            raise BuildError("compile", errors[-20:], "fix the code (the lines above)")
        progress("packaging: strip, symfs, image")
        manifest = _package(recipe, out, key, base, git_hash, patch_files)
        shutil.rmtree(out / "out")  # the build's own files: packaged, and owned by its uid
    except BaseException:
        _remove_worktree(recipe.repo, tree)
        shutil.rmtree(out, ignore_errors=True)
        raise
    _remove_worktree(recipe.repo, tree)
    manifest_path.write_text(manifest.model_dump_json(indent=2))  # written last: marks complete
    return manifest, False


def fingerprint(path: Path, git_hash: str, build_id: str | None) -> str:
    """sha256 of a built file with what differs between any two builds of the same code zeroed:
    the commit hash every binary embeds and the ELF build-id (a hash over the rest). The build
    runs at fixed paths (/build/src, /build/out), so the same sources give the same bytes."""
    data = path.read_bytes().replace(git_hash.encode(), b"0" * len(git_hash))
    if build_id:
        data = data.replace(bytes.fromhex(build_id), bytes(len(build_id) // 2))
    return hashlib.sha256(data).hexdigest()


def fingerprints(manifest: BuildManifest, names: list[str]) -> dict[str, str]:
    """The fingerprint of each named output of a build: an artifact (its stripped file) or an
    extra output kept beside the image; 'absent' when the build has none of that name."""
    out = Path(manifest.image).parent
    found: dict[str, str] = {}
    for name in names:
        art = next((a for a in manifest.artifacts if a.name == name), None)
        path = Path(manifest.symfs) / art.path.lstrip("/") if art else out / name
        if path.is_symlink() or not path.is_file():
            found[name] = "absent"
            continue
        bid = art.build_id if art else _build_id_or_none(path)
        found[name] = fingerprint(path, manifest.git_hash, bid)
    return found


def _build_id_or_none(path: Path) -> str | None:
    try:
        return elfsym.build_id(path) or None
    except ELFError:  # not an ELF file (a script): its bytes as they are
        return None


def changed_outputs(a: BuildManifest, b: BuildManifest, names: list[str]) -> list[str]:
    """The named outputs whose code differs between two builds."""
    fa, fb = fingerprints(a, names), fingerprints(b, names)
    return [n for n in names if fa[n] != fb[n]]


def _package(recipe: BuildRecipe, out: Path, key: str, base: str, git_hash: str,
             patch_files: list[Patch]) -> BuildManifest:
    """Strip deploy files into the image; keep debug info in a perf-ready symfs."""
    stage = out / "stage" / "rootfs"
    symfs = out / "symfs"
    artifacts: list[Artifact] = []
    for name, rel in recipe.artifacts.items():
        built = out / "out" / name
        if built.is_symlink() or not built.is_file():  # the build's files are the build's to name
            try:
                top = sorted(f.name for f in (out / "out").iterdir())
            except OSError:
                top = []
            raise BuildError("package", [
                f"the build did not produce {name} (a regular file): looked for {{out}}/{name}, "
                "{out} being the build's output dir",
                f"{{out}} holds at its top: {', '.join(top[:20]) or 'nothing'}"
                + (f" (and {len(top) - 20} more)" if len(top) > 20 else "")],
                "check [build] artifacts in the lab profile: each key is a file the build "
                "command writes under {out} (a path relative to it)")
        dest = stage / rel.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        bid = elfsym.build_id(built)
        dut_path = str(Path(recipe.rootfs) / rel.lstrip("/"))
        debug = symfs / "usr" / "lib" / "debug" / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
        debug.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([recipe.objcopy(), "--only-keep-debug", str(built), str(debug)], check=True)
        subprocess.run([recipe.strip, "--strip-unneeded", "-o", str(dest), str(built)], check=True)
        in_symfs = symfs / dut_path.lstrip("/")
        in_symfs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(dest, in_symfs)
        artifacts.append(Artifact(name=name, path=dut_path, sha256=sha256_file(dest), build_id=bid))
    image = out / "image.tar.gz"
    with tarfile.open(image, "w:gz") as tar:
        tar.add(stage, arcname="rootfs")
    for extra in recipe.extra_outputs:
        if (out / "out" / extra).is_file() and not (out / "out" / extra).is_symlink():
            shutil.copy2(out / "out" / extra, out / extra)
    return BuildManifest(build_id=key, git_hash=git_hash, base=base,
                         patches=[p.name for p in patch_files], artifacts=artifacts,
                         image=str(image), symfs=str(symfs))
