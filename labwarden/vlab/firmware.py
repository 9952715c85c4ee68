"""The vlab's firmware: its sources as a git repo in the state dir, and its build recipe."""

from __future__ import annotations

import shutil
import tempfile
from importlib import resources
from pathlib import Path

from labwarden.lab.host import builder
from labwarden.lab.host.builder import BuildError, BuildManifest, git
from labwarden.vlab.layout import VlabLayout

__all__ = ["BuildError", "BuildManifest", "build", "init_repo", "recipe"]

COMMAND = ["make", "-s", "-j{jobs}", "O={out}", "GIT_HASH={git_hash}"]
DEPLOY = {"libsta.so": "usr/lib/libsta.so", "stad": "usr/sbin/stad",
          "stamon": "usr/sbin/stamon", "stacli": "usr/bin/stacli"}
"""Build output -> path inside the DUT rootfs."""
LOADGEN = ["stasim", "libsta.so"]
"""The load side, kept beside the image: stasim finds libsta.so next to itself ($ORIGIN)."""


def firmware_package_dir() -> Path:
    return Path(str(resources.files("labwarden.vlab") / "firmware"))


def patches_package_dir() -> Path:
    return Path(str(resources.files("labwarden.vlab") / "patches"))


REGRESSION = "wld: sync the static AssociatedDevice params with every driver sample"
"""Subject of the one commit of the vlab history that makes stad slower (what bisect finds)."""
HISTORY = (
    ("firmware: libsta, stad, stamon, stasim and stacli", ()),
    ("sample-config: a config dir to run the daemon by hand", ("sample-config",)),
    (REGRESSION, ("wld.c",)),
    ("measure.sh: stad CPU% on a development machine", ("measure.sh",)),
    ("CONTRACT.md: what the firmware promises", ("CONTRACT.md",)),
)
"""(subject, the paths that commit adds or restores to their packaged form), oldest first. The
first commit holds the rest, with wld.c's static write-back gated on real change (patch 0901's
code); the regression brings back the per-sample gate. HEAD is the packaged tree, unchanged."""


def init_repo(layout: VlabLayout) -> str:
    """Create the firmware git repo from package data (once); returns the commit hash of HEAD,
    whose tree is the packaged firmware. The repo has a short history (HISTORY) with one
    regressing commit, for bisect."""
    if (layout.src / ".git").exists():
        return git(layout.src, "rev-parse", "HEAD")
    shutil.copytree(firmware_package_dir(), layout.src,
                    ignore=shutil.ignore_patterns("out", "*.o", "*.so", "__pycache__"))
    git(layout.src, "init", "-q", "-b", "main")
    with tempfile.TemporaryDirectory(prefix="lw-fw-") as held:
        later = [p for _subject, paths in HISTORY[1:] for p in paths]
        for rel in later:  # set aside what later commits bring (wld.c is copied: 0901 edits it)
            (shutil.copy2 if rel == "wld.c" else shutil.move)(str(layout.src / rel), str(Path(held) / rel))
        git(layout.src, "apply", str(patches_package_dir() / "0901-gate-static-writeback.patch"))
        for subject, paths in HISTORY:
            for rel in paths:
                dest = layout.src / rel
                if dest.is_file():
                    dest.unlink()
                shutil.move(str(Path(held) / rel), str(dest))
            git(layout.src, "add", "-A")
            git(layout.src, "commit", "-q", "-m", subject)
    return git(layout.src, "rev-parse", "HEAD")


def patches_dirs(layout: VlabLayout) -> list[Path]:
    """Submitted patches (the state dir's patches/) first, then the shipped ones."""
    return [layout.root / "patches", patches_package_dir()]


def recipe(layout: VlabLayout) -> builder.BuildRecipe:
    return builder.BuildRecipe(repo=layout.src, builds=layout.builds, rootfs=str(layout.rootfs),
                               command=COMMAND, artifacts=DEPLOY, extra_outputs=LOADGEN,
                               patches_dirs=patches_dirs(layout))


def build(layout: VlabLayout, patches: list[str] | None = None,
          ref: str = "HEAD") -> tuple[BuildManifest, bool]:
    return builder.build(recipe(layout), patches, ref)
