"""The qlab's firmware: the vlab's C sources built on the host for the guest with the nl80211 HAL
(same Debian release and architecture: the host's gcc and libnl-genl-3-dev), packed into a
flashable root filesystem image.

The image (`qlab-fw.img` beside the build's image.tar.gz) is an ext4 filesystem holding the
deploy files at their DUT paths (usr/sbin/stad ...) and `usr/lib/lwfw/manifest`, followed by a
512-byte trailer the guest's sysupgrade checks: `LWFW1`, the board, the filesystem's size and
sha256. The guest mounts it from its flash disk under the base image (an OpenWrt-like overlay):
only paths under usr/ may be in it (the base image's /lib, /bin are symlinks into usr/).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from labwarden.core.errors import LabError
from labwarden.lab.host import builder
from labwarden.lab.host.builder import BuildError, BuildManifest, git
from labwarden.qlab.image import BOARD
from labwarden.qlab.layout import QlabLayout
from labwarden.vlab.firmware import DEPLOY, firmware_package_dir, patches_package_dir

COMMAND = ["make", "-s", "-j{jobs}", "O={out}", "GIT_HASH={git_hash}", "HAL=nl80211"]
"""The vlab's build with the kernel's HAL."""
TRAILER = 512
IMAGE_NAME = "qlab-fw.img"
FLASH_BYTES = 64 << 20
"""Size of the guest's flash disk."""
READY_S = 60
READY_SH = (f"[ -x /usr/sbin/stad ] || exit 0; i=0; while [ $i -lt {READY_S * 2} ]; do "
            "stacli --socket /run/stad.sock version >/dev/null 2>&1 && exit 0; "
            "i=$((i + 1)); sleep 0.5; done; echo 'stad does not answer on /run/stad.sock' >&2; exit 1")
"""Run in the guest after a boot: wait (up to READY_S) until the firmware's daemon answers. The
guest's boot starts stad after `wifi up`, so APs that are up say nothing of it: a health check
right after a boot found stad `not running` and called the board bad."""


def init_repo(layout: QlabLayout) -> str:
    """The firmware git repo of this qlab (the vlab's sources, once); returns the commit."""
    if not (layout.src / ".git").exists():
        shutil.copytree(firmware_package_dir(), layout.src,
                        ignore=shutil.ignore_patterns("out", "*.o", "*.so", "__pycache__"))
        git(layout.src, "init", "-q", "-b", "main")
        git(layout.src, "add", "-A")
        git(layout.src, "commit", "-q", "-m", "qlab firmware (vlab sources, nl80211 HAL)")
    return git(layout.src, "rev-parse", "HEAD")


def patches_dirs(layout: QlabLayout) -> list[Path]:
    return [layout.root / "patches", patches_package_dir()]


def recipe(layout: QlabLayout) -> builder.BuildRecipe:
    return builder.BuildRecipe(repo=layout.src, builds=layout.builds, rootfs="/", command=COMMAND,
                               artifacts=DEPLOY, patches_dirs=patches_dirs(layout))


def build(layout: QlabLayout, patches: list[str] | None = None,
          ref: str = "HEAD") -> tuple[BuildManifest, Path]:
    """Build (cached by the builder) and pack; returns the manifest and the flashable image."""
    manifest, _cached = builder.build(recipe(layout), patches, ref)
    return manifest, pack(manifest)


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise BuildError(what, (out.stderr or out.stdout).strip().splitlines()[-10:],
                         "check e2fsprogs (mkfs.ext4 -d needs e2fsprogs >= 1.43)")


def pack(manifest: BuildManifest, board: str = BOARD) -> Path:
    """The build's flashable image (made once per build: the same build gives the same bytes)."""
    image = Path(manifest.image).with_name(IMAGE_NAME)
    if image.exists():
        return image
    with tempfile.TemporaryDirectory(prefix="qlab-fw-", dir=image.parent) as tmp:
        tree = Path(tmp) / "tree"
        with tarfile.open(manifest.image) as tar:
            tar.extractall(tmp, filter="data")
        (Path(tmp) / "rootfs").rename(tree)
        bad = sorted(str(p.relative_to(tree)) for p in tree.iterdir() if p.name != "usr")
        if bad:
            raise BuildError("pack", [f"image paths outside usr/: {bad}"],
                             "deploy firmware files under usr/ (the base image's /lib is a symlink)")
        meta = tree / "usr" / "lib" / "lwfw" / "manifest"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"build_id={manifest.build_id}\ngit_hash={manifest.git_hash}\n"
                        + "".join(f"{a.sha256}  {a.path}\n" for a in manifest.artifacts))
        for path in tree.rglob("*"):  # fixed times: the same build packs to the same bytes
            os.utime(path, (0, 0), follow_symlinks=False)
        used = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
        fs = Path(tmp) / "fs.ext4"
        size_kb = max(4096, (used * 3 // 2) // 1024 + 1024)
        seed = hashlib.sha256(manifest.build_id.encode()).hexdigest()
        uuid = f"{seed[:8]}-{seed[8:12]}-{seed[12:16]}-{seed[16:20]}-{seed[20:32]}"
        _run(["mkfs.ext4", "-q", "-F", "-L", "qlab-fw", "-O", "^has_journal", "-U", uuid,
              "-E", f"root_owner=0:0,hash_seed={uuid}", "-d", str(tree), str(fs), f"{size_kb}k"],
             "mkfs.ext4", env={**os.environ, "E2FSPROGS_FAKE_TIME": "1"})
        data = fs.read_bytes()
        if len(data) + TRAILER > FLASH_BYTES:
            raise BuildError("pack", [f"{len(data)} bytes do not fit the {FLASH_BYTES}-byte flash"],
                             "make the firmware smaller")
        trailer = (f"LWFW1\nboard={board}\nsize={len(data)}\n"
                   f"sha256={hashlib.sha256(data).hexdigest()}\nbuild={manifest.build_id}\n").encode()
        tmp_image = Path(tmp) / IMAGE_NAME
        tmp_image.write_bytes(data + trailer.ljust(TRAILER, b"\0"))
        tmp_image.replace(image)
    return image


class ImageRefused(LabError):
    """An image that is not a good qlab firmware image (checked before the DUT is touched)."""

    kind = "invalid_input"


def check_image(image: Path, board: str = BOARD) -> dict[str, str]:
    """The checks the guest's sysupgrade makes, on the host: the LWFW1 trailer, the board, the
    filesystem's size and sha256, and that it fits the flash. Returns the trailer's fields."""
    def refuse(why: str) -> ImageRefused:
        return ImageRefused(f"image {image}: {why}",
                            "flash a build's image (`build`, then `flash` its build_id)")

    try:
        data = image.read_bytes()
    except OSError as exc:
        raise refuse(f"cannot read it: {exc.strerror}") from exc
    if len(data) <= TRAILER:
        raise refuse("too small to be a firmware image")
    if len(data) > FLASH_BYTES:
        raise refuse(f"{len(data)} bytes do not fit the {FLASH_BYTES}-byte flash")
    lines = data[-TRAILER:].rstrip(b"\0").decode(errors="replace").splitlines()
    if not lines or lines[0] != "LWFW1":
        raise refuse("no LWFW1 trailer: not a qlab firmware image")
    fields = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    if fields.get("board") != board:
        raise refuse(f"built for board {fields.get('board')!r}, this is {board!r}")
    if fields.get("size") != str(len(data) - TRAILER):
        raise refuse(f"trailer says {fields.get('size')} bytes of filesystem, the file holds "
                     f"{len(data) - TRAILER}")
    if hashlib.sha256(data[:-TRAILER]).hexdigest() != fields.get("sha256"):
        raise refuse("sha256 differs from the trailer's: corrupt image")
    return fields


def install(layout: QlabLayout, image: Path) -> dict[str, str]:
    """Program a powered-off qlab as a factory programmer would: `image` (checked first) onto the
    flash disk, and the data disk marked for a clean overlay on the next boot (/overlay/.wipe, as
    the guest's sysupgrade leaves it; the initramfs keeps /etc/config). QEMU must not run."""
    fields = check_image(image)
    write_flash(layout.flash_disk, image)
    # QEMU quit without the guest unmounting: replay the data disk's journal before writing to
    # it, or the guest's replay at mount could undo the new directory entry
    fsck = subprocess.run(["e2fsck", "-p", str(layout.data_disk)], capture_output=True, text=True)
    if fsck.returncode > 1:
        raise BuildError("e2fsck", (fsck.stderr or fsck.stdout).strip().splitlines()[-10:],
                         f"the data disk {layout.data_disk} is damaged: `qlab down`, then `qlab up` "
                         "makes a fresh one")
    out = subprocess.run(["debugfs", "-w", "-f", "-", str(layout.data_disk)],
                         input="rm .wipe\nwrite /dev/null .wipe\n", capture_output=True, text=True)
    check = subprocess.run(["debugfs", "-R", "stat .wipe", str(layout.data_disk)],
                           capture_output=True, text=True)
    if out.returncode != 0 or "Inode:" not in check.stdout:
        raise BuildError("debugfs", (out.stderr + check.stderr).strip().splitlines()[-10:],
                         "check e2fsprogs (debugfs) and the data disk")
    return fields


def write_flash(disk: Path, image: Path | None) -> None:
    """A fresh flash disk holding `image` (or nothing: the guest boots its base image alone), as
    a factory programmer would write it before the first boot."""
    with disk.open("wb") as f:
        if image is not None:
            f.write(image.read_bytes())
        f.truncate(FLASH_BYTES)
