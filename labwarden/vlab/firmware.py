"""Build the vlab firmware from its git repo: clean worktree per (ref, patches), content-addressed.

The result is a directory `builds/<build_id>/` holding
- `image.tar.gz`: the deploy files, stripped, at their rootfs paths (what sysupgrade flashes);
- `symfs/`: for perf on the host -- each stripped file at its DUT path, its debug info under
  `usr/lib/debug/.build-id/xx/rest.debug`;
- `manifest.json`: git hash, and per file its DUT path, sha256 and ELF build-id.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from importlib import resources
from pathlib import Path

from elftools.elf.elffile import ELFFile
from pydantic import BaseModel, Field

from labwarden.vlab.layout import VlabLayout

DEPLOY = {"libsta.so": "usr/lib/libsta.so", "stad": "usr/sbin/stad", "stamon": "usr/sbin/stamon"}
"""Build output -> path inside the DUT rootfs. stasim is the load side, not part of the image."""

# Fixed identity and dates: the same firmware sources give the same commit on every machine.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "labwarden", "GIT_AUTHOR_EMAIL": "vlab@labwarden.invalid",
    "GIT_COMMITTER_NAME": "labwarden", "GIT_COMMITTER_EMAIL": "vlab@labwarden.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


class BuildError(RuntimeError):
    """A patch that does not apply or code that does not compile; `lines` are the failing lines."""

    def __init__(self, stage: str, lines: list[str]):
        self.stage = stage
        self.lines = lines
        super().__init__(f"{stage} failed:\n" + "\n".join(lines))


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


def firmware_package_dir() -> Path:
    return Path(str(resources.files("labwarden.vlab") / "firmware"))


def patches_package_dir() -> Path:
    return Path(str(resources.files("labwarden.vlab") / "patches"))


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                         env={**os.environ, **_GIT_ENV})
    if out.returncode != 0:
        raise BuildError(f"git {args[0]}", (out.stderr or out.stdout).strip().splitlines()[-20:])
    return out.stdout.strip()


def init_repo(layout: VlabLayout) -> str:
    """Create the firmware git repo from package data (once); returns the commit hash."""
    if not (layout.src / ".git").exists():
        shutil.copytree(firmware_package_dir(), layout.src,
                        ignore=shutil.ignore_patterns("out", "*.o", "*.so", "__pycache__"))
        _git(layout.src, "init", "-q", "-b", "main")
        _git(layout.src, "add", "-A")
        _git(layout.src, "commit", "-q", "-m", "vlab firmware")
    return _git(layout.src, "rev-parse", "HEAD")


def resolve_patch(ref: str) -> Path:
    """A patch id ('0901') names a shipped patch; anything else must be an existing file."""
    shipped = sorted(patches_package_dir().glob(f"{ref}-*.patch")) if ref.isdigit() else []
    if shipped:
        return shipped[0]
    path = Path(ref)
    if path.is_file():
        return path.resolve()
    known = ", ".join(p.name.split("-")[0] for p in sorted(patches_package_dir().glob("*.patch")))
    raise BuildError("patch lookup", [f"unknown patch {ref!r}: shipped patches are {known}; "
                                      "or give the path of a .patch file"])


def build_key(base: str, patch_files: list[Path]) -> str:
    h = hashlib.sha256(base.encode())
    for p in patch_files:
        h.update(b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def elf_build_id(path: Path) -> str:
    with path.open("rb") as f:
        for section in ELFFile(f).iter_sections():
            if section.header.sh_type == "SHT_NOTE":
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return str(note["n_desc"])
    return ""


def build(layout: VlabLayout, patches: list[str] | None = None, ref: str = "HEAD",
          jobs: int | None = None) -> tuple[BuildManifest, bool]:
    """Build (ref + patches); returns (manifest, cached). Raises BuildError with failing lines."""
    patch_files = [resolve_patch(p) for p in (patches or [])]
    base = _git(layout.src, "rev-parse", ref)
    key = build_key(base, patch_files)
    out = layout.builds / key
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        return BuildManifest.model_validate_json(manifest_path.read_text()), True
    tree = out / "tree"
    if out.exists():  # a half-finished earlier attempt: start clean
        subprocess.run(["git", "-C", str(layout.src), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)
        shutil.rmtree(out)
    out.mkdir(parents=True)
    _git(layout.src, "worktree", "add", "-q", "--detach", str(tree), base)
    try:
        for pf in patch_files:
            res = subprocess.run(["git", "-C", str(tree), "apply", "--index", str(pf)],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise BuildError(f"patch {pf.name}", res.stderr.strip().splitlines()[-20:])
        if patch_files:
            _git(tree, "commit", "-q", "-m", "apply " + " ".join(p.name for p in patch_files))
        git_hash = _git(tree, "rev-parse", "HEAD")
        res = subprocess.run(
            ["make", "-C", str(tree), f"-j{jobs or os.cpu_count() or 1}", f"O={out / 'out'}",
             f"GIT_HASH={git_hash}"], capture_output=True, text=True)
        if res.returncode != 0:
            errors = [ln for ln in (res.stderr + res.stdout).splitlines()
                      if "error" in ln.lower()] or res.stderr.splitlines()
            raise BuildError("compile", errors[-20:])
        manifest = _package(layout, out, key, base, git_hash, patch_files)
    except BaseException:
        subprocess.run(["git", "-C", str(layout.src), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)
        shutil.rmtree(out, ignore_errors=True)
        raise
    subprocess.run(["git", "-C", str(layout.src), "worktree", "remove", "--force", str(tree)],
                   capture_output=True)
    manifest_path.write_text(manifest.model_dump_json(indent=2))
    return manifest, False


def _package(layout: VlabLayout, out: Path, key: str, base: str, git_hash: str,
             patch_files: list[Path]) -> BuildManifest:
    """Strip deploy files into the image, keep debug info in a perf-ready symfs."""
    stage = out / "stage" / "rootfs"
    symfs = out / "symfs"
    artifacts: list[Artifact] = []
    for name, rel in DEPLOY.items():
        built = out / "out" / name
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        bid = elf_build_id(built)
        dut_path = layout.rootfs / rel
        debug = symfs / "usr" / "lib" / "debug" / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
        debug.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["objcopy", "--only-keep-debug", str(built), str(debug)], check=True)
        subprocess.run(["strip", "--strip-unneeded", "-o", str(dest), str(built)], check=True)
        in_symfs = symfs / str(dut_path).lstrip("/")
        in_symfs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(dest, in_symfs)
        artifacts.append(Artifact(name=name, path=str(dut_path), sha256=sha256_file(dest),
                                  build_id=bid))
    image = out / "image.tar.gz"
    with tarfile.open(image, "w:gz") as tar:
        tar.add(out / "stage" / "rootfs", arcname="rootfs")
    stasim = out / "out" / "stasim"
    manifest = BuildManifest(build_id=key, git_hash=git_hash, base=base,
                             patches=[p.name for p in patch_files], artifacts=artifacts,
                             image=str(image), symfs=str(symfs))
    (out / "manifest.json").write_text(json.dumps(manifest.model_dump(), indent=2))
    if stasim.exists():
        shutil.copy2(stasim, out / "stasim")
    return manifest
