"""The vlab's firmware: its sources as a git repo in the state dir, and its build recipe."""

from __future__ import annotations

import shutil
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


def init_repo(layout: VlabLayout) -> str:
    """Create the firmware git repo from package data (once); returns the commit hash."""
    if not (layout.src / ".git").exists():
        shutil.copytree(firmware_package_dir(), layout.src,
                        ignore=shutil.ignore_patterns("out", "*.o", "*.so", "__pycache__"))
        git(layout.src, "init", "-q", "-b", "main")
        git(layout.src, "add", "-A")
        git(layout.src, "commit", "-q", "-m", "vlab firmware")
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
