"""The qlab's guest image, built from Debian packages and cached outside git.

Two layers, each cached under its own key, so that editing a guest script does not re-download
Debian:
- base (`base-KEY/`, ~40 s cold): a minimal Debian root made by mmdebstrap from the mirror apt is
  configured with (busybox, dropbear, hostapd, wpa_supplicant, iw, iproute2, iperf3, linux-perf,
  libnl, nftables, wireguard-tools), Python removed, busybox applets installed, the kernel's
  modules the qlab needs, the pinned dropbear host key and a client key. KEY covers the package
  versions apt offers (`apt-cache policy`) and the recipe.
- image (`image-KEY/`, ~10 s): the base root plus the guest files of labwarden/qlab/guest
  (init, /etc/config, wifi, service, sysupgrade, lw-sta) as an ext4 disk image, with the kernel
  and a small initramfs. KEY covers the base key and every guest file.

`ensure()` builds what is missing under a lock (concurrent callers build once); root only, as
mmdebstrap and chroot need it. With both layers cached it costs one `apt-cache policy` (~0.3 s).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.qlab import debian, kernel
from labwarden.qlab.layout import cache_dir
from labwarden.vlab.tuning import factory_config_dir

BASE_RECIPE = 1
"""Bump when the base layer's recipe changes (packages, pruning, keys): a new base key."""
IMAGE_RECIPE = 1
"""Bump when the image layer's recipe changes beyond the guest files themselves."""

PACKAGES = ("busybox", "dropbear-bin", "openssh-sftp-server", "hostapd", "wpasupplicant", "iw",
            "iproute2", "iperf3", "linux-perf", "libnl-3-200", "libnl-genl-3-200", "nftables",
            "wireguard-tools", "kmod", "wireless-regdb", "e2fsprogs", "libc6-dbg")
"""What the guest root is made of (with their dependencies), beside Debian's essential set
(e2fsprogs: sysupgrade packs a build's tar image into the flash format with mke2fs -d; libc6-dbg:
the DUT's own libc debug file, which symbolize fetches by build-id -- without it libc's static
`__libc_start_call_main` under every stack is an unknown frame, ~7%, and the gate fails)."""

BOARD = "qlab"
"""The board name sysupgrade checks an image against."""

RELEASE = "r1-qlab"
"""DISTRIB_REVISION of the image's /etc/openwrt_release; a firmware image never bumps it."""

EXECUTABLE_DIRS = ("usr/sbin/", "usr/bin/", "usr/lib/lw/", "etc/init.d/")

Progress = Callable[[str], None]


class ImageError(LabError):
    """The guest image cannot be built."""

    kind = "tool"


class QlabImage(BaseModel):
    """A built guest image (image-KEY/manifest.json)."""

    key: str
    base_key: str
    dir: str
    kernel_version: str
    kernel: str = Field(description="the kernel (bzImage)")
    initrd: str = Field(description="the initramfs that mounts the root")
    rootfs: str = Field(description="the base disk image (ext4), read-only at run time")
    base_root: str = Field(description="the unpacked base root: the guest's own files, for a symfs")
    packages: dict[str, str] = Field(description="installed package -> version")
    requested: dict[str, str] = Field(description="package -> the version apt offered (the key)")
    host_key: str = Field(description="the guest's dropbear host key ('ssh-ed25519 AAAA...')")
    client_key: str = Field(description="private key that root's authorized_keys accepts")
    build_s: dict[str, float] = Field(default_factory=dict, description="seconds per layer built")
    built_at: str


class BaseLayer(BaseModel):
    """A built base layer (base-KEY/base.json)."""

    key: str
    kernel_version: str
    packages: dict[str, str]
    requested: dict[str, str]
    host_key: str
    build_s: float


def guest_dir() -> Path:
    return Path(str(resources.files("labwarden.qlab") / "guest"))


# --- keys ------------------------------------------------------------------------------------------

def _lists_fingerprint() -> str:
    """apt's view of the archive: its package lists (name, size, mtime) and its sources."""
    parts = []
    for d in (Path("/var/lib/apt/lists"), *debian.SOURCES):
        files = sorted(d.iterdir()) if d.is_dir() else [d]
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    return _digest(*parts)


def requested_versions(progress: Progress) -> dict[str, str]:
    """What apt would install today: each package's candidate and the current kernel image.
    Asking apt costs ~1 s; the answer is kept until apt's lists or sources change."""
    memo = cache_dir() / "apt-resolution.json"
    fingerprint = _lists_fingerprint()
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(memo.read_text())
        if saved.get("fingerprint") == fingerprint and saved.get("packages") == list(PACKAGES):
            return dict(saved["requested"])
    requested = _ask_apt(progress)
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fingerprint": _lists_fingerprint(), "packages": list(PACKAGES),
                               "requested": requested}))
    tmp.replace(memo)
    return requested


def _ask_apt(progress: Progress) -> dict[str, str]:
    kpkg = debian.kernel_package()
    wanted = [*PACKAGES, kpkg]
    found = debian.candidates(wanted)
    if any(v is None for v in found.values()):
        progress("apt has no candidate for some packages: apt-get update")
        debian.update_lists()
        kpkg = debian.kernel_package()
        wanted = [*PACKAGES, kpkg]
        found = debian.candidates(wanted)
    missing = sorted(p for p, v in found.items() if v is None)
    if missing:
        raise ImageError(f"apt knows no version of {', '.join(missing)}",
                         "check /etc/apt/sources.list (Debian main) and run `apt-get update`")
    return {p: str(v) for p, v in found.items()}


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def base_key(requested: dict[str, str], sources: list[debian.AptSource]) -> str:
    return _digest(f"base{BASE_RECIPE}", *sorted(f"{p}={v}" for p, v in requested.items()),
                   *(s.line() for s in sources), *kernel.RUNTIME_MODULES, *kernel.RUNTIME_GLOBS)


def _guest_files() -> list[tuple[str, Path]]:
    root = guest_dir()
    return sorted((str(p.relative_to(root)), p) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def image_key(base: str) -> str:
    parts: list[str | bytes] = [f"image{IMAGE_RECIPE}", base, BOARD, RELEASE, *kernel.INITRAMFS_MODULES]
    for rel, path in _guest_files():
        parts += [rel, path.read_bytes()]
    for name in ("trace", "stamon"):
        parts.append((factory_config_dir() / name).read_bytes())
    return _digest(*parts)


# --- locking and running ---------------------------------------------------------------------------

@contextlib.contextmanager
def _locked(path: Path, progress: Progress) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build holding {path.name}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, progress: Progress | None = None, timeout: float = 1800) -> str:
    """Run a build step; with `progress`, its output lines are reported as they come."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if progress is not None and line.startswith("I: "):
            progress(f"{what}: {line[3:].strip()}")
        if time.monotonic() > deadline:
            proc.kill()
    if proc.wait() != 0:
        raise ImageError(f"{what} failed (exit {proc.returncode})",
                         "see the lines below; network or mirror trouble is the usual cause",
                         lines=lines[-20:])
    return "\n".join(lines)


def _require_tools() -> None:
    if os.geteuid() != 0:
        raise ImageError("building the qlab image needs root (mmdebstrap and chroot build a Debian "
                         "root with root-owned files)",
                         "run `make setup` (or `labwarden qlab image`) as root once; the image is "
                         "then cached for every user of this cache dir")
    missing = [t for t in ("mmdebstrap", "mkfs.ext4", "dpkg-deb", "apt-get", "chroot")
               if shutil.which(t) is None]
    if missing:
        raise ImageError(f"missing host tools: {', '.join(missing)}",
                         "run `make setup` (it installs mmdebstrap, qemu-system-x86 and e2fsprogs)")


# --- the base layer --------------------------------------------------------------------------------

def _mmdebstrap(root: Path, sources: list[debian.AptSource], progress: Progress) -> None:
    release = sources[0].suite
    argv = ["mmdebstrap", "--mode=root", "--variant=essential", "--include=" + ",".join(PACKAGES),
            *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")),
            release, str(root), *(s.line() for s in sources)]
    _run(argv, "mmdebstrap", progress)


def _prune_python(root: Path) -> None:
    """No Python on the DUT: linux-perf depends on python3 (for `perf script -s`), but only its
    library is linked; the interpreters and the standard library go."""
    listed = _run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Package}\\n"], "dpkg-query")
    pythons = [p for p in listed.split() if p.startswith("python3")]
    if pythons:
        _run(["chroot", str(root), "dpkg", "--purge", "--force-depends", *pythons], "dpkg --purge")
    for d in (root / "usr" / "lib").glob("python3*"):
        shutil.rmtree(d)
    left = [p.name for p in (root / "usr" / "bin").glob("python*")]
    if left:
        raise ImageError(f"python left in the guest: {left}", "extend _prune_python")


def _dropbear_key(root: Path) -> str:
    key = "/etc/dropbear/dropbear_ed25519_host_key"
    (root / "etc" / "dropbear").mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (root / key.lstrip("/")).unlink()
    _run(["chroot", str(root), "dropbearkey", "-t", "ed25519", "-f", key], "dropbearkey")
    out = _run(["chroot", str(root), "dropbearkey", "-y", "-f", key], "dropbearkey -y")
    line = next((ln for ln in out.splitlines() if ln.startswith("ssh-ed25519 ")), None)
    if line is None:
        raise ImageError("dropbearkey printed no public key", "rebuild the base layer")
    return " ".join(line.split()[:2])


def _client_key(keys: Path, root: Path) -> None:
    keys.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="labwarden-qlab")
    key.write_private_key(str(keys / "id_ed25519"))
    key.write_public_key(str(keys / "id_ed25519.pub"))
    (keys / "id_ed25519").chmod(0o600)
    ssh = root / "root" / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    ssh.chmod(0o700)
    shutil.copyfile(keys / "id_ed25519.pub", ssh / "authorized_keys")
    (ssh / "authorized_keys").chmod(0o600)


def _root_shell(root: Path) -> None:
    """root logs in to busybox ash, as on OpenWrt (dropbear refuses a shell not in /etc/shells)."""
    passwd = root / "etc" / "passwd"
    lines = passwd.read_text().splitlines()
    lines = [":".join([*ln.split(":")[:6], "/bin/ash"]) if ln.startswith("root:") else ln
             for ln in lines]
    passwd.write_text("\n".join(lines) + "\n")
    shells = root / "etc" / "shells"
    if "/bin/ash" not in shells.read_text().split():
        with shells.open("a") as f:
            f.write("/bin/ash\n")


def _installed(root: Path) -> dict[str, str]:
    out = _run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Package} ${Version}\\n"],
               "dpkg-query")
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def build_base(dest: Path, requested: dict[str, str], sources: list[debian.AptSource],
               progress: Progress) -> BaseLayer:
    t0 = time.monotonic()
    work = dest.with_name(dest.name + ".tmp")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    root = work / "root"
    progress(f"mmdebstrap {sources[0].suite} from {sources[0].uri} ({len(PACKAGES)} packages)")
    _mmdebstrap(root, sources, progress)
    progress("pruning: python, busybox applets, sftp-server, root's shell")
    _prune_python(root)
    _run(["chroot", str(root), "/bin/busybox", "--install", "-s"], "busybox --install")
    sftp = root / "usr" / "lib" / "sftp-server"  # where Debian's dropbear looks for it
    if not sftp.exists():
        sftp.symlink_to("openssh/sftp-server")
    _root_shell(root)
    kpkg = next(p for p in requested if p.startswith("linux-image-"))
    progress(f"kernel: apt-get download {kpkg}={requested[kpkg]}")
    deb = debian.download(kpkg, requested[kpkg], cache_dir() / "debs")
    tree = kernel.unpack(deb, work / "kernel")
    progress(f"kernel {tree.version}: selecting modules")
    names = kernel.install_modules(tree, root)
    progress(f"kernel {tree.version}: {len(names)} modules installed, depmod done")
    shutil.copy2(tree.vmlinuz, work / "vmlinuz")
    shutil.copy2(tree.root / "boot" / f"config-{tree.version}", work / "config")
    shutil.copy2(tree.root / "boot" / f"System.map-{tree.version}", work / "System.map")
    shutil.rmtree(tree.root)
    progress("keys: dropbear host key, client key")
    host_key = _dropbear_key(root)
    _client_key(work / "keys", root)
    for d in ("rom/base", "rom/fw", "overlay", "etc/lw"):
        (root / d).mkdir(parents=True, exist_ok=True)
    layer = BaseLayer(key=dest.name.removeprefix("base-"), kernel_version=tree.version,
                      packages=_installed(root), requested=requested, host_key=host_key,
                      build_s=round(time.monotonic() - t0, 1))
    (work / "base.json").write_text(layer.model_dump_json(indent=2))
    work.rename(dest)
    return layer


# --- the image layer -------------------------------------------------------------------------------

def _install_guest_files(tree: Path) -> None:
    for rel, src in _guest_files():
        if not rel.startswith("rootfs/"):
            continue
        rel = rel.removeprefix("rootfs/")
        parent, _, name = rel.rpartition("/")
        dest = kernel.in_root(tree, parent) / name  # the file itself is replaced, never followed
        dest.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            dest.unlink()
        shutil.copyfile(src, dest)
        dest.chmod(0o755 if rel.startswith(EXECUTABLE_DIRS) else 0o644)
    config = tree / "etc" / "config"
    for name in ("trace", "stamon"):  # the firmware's factory config, one source with the vlab's
        shutil.copyfile(factory_config_dir() / name, config / name)
    (tree / "etc" / "hostname").write_text("qlab-dut\n")
    (tree / "etc" / "lw" / "board").write_text(BOARD + "\n")
    (tree / "etc" / "openwrt_release").write_text(
        "DISTRIB_ID='OpenWrt'\nDISTRIB_RELEASE='qlab'\n"
        f"DISTRIB_REVISION='{RELEASE}'\nDISTRIB_TARGET='x86/64'\n"
        "DISTRIB_DESCRIPTION='labwarden qlab (Debian kernel under QEMU)'\n")


def _mkfs(tree: Path, image: Path, label: str, slack_mb: int = 64) -> None:
    used = int(_run(["du", "-sx", "--block-size=1M", str(tree)], "du").split()[0])
    size_mb = int(used * 1.15) + slack_mb
    _run(["mkfs.ext4", "-q", "-F", "-L", label, "-O", "^has_journal", "-E", "root_owner=0:0",
          "-d", str(tree), str(image), f"{size_mb}M"], f"mkfs.ext4 {image.name}")


def build_image(dest: Path, base_dir: Path, base: BaseLayer, progress: Progress) -> QlabImage:
    t0 = time.monotonic()
    work = dest.with_name(dest.name + ".tmp")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tree = work / "tree"
    progress("image: copying the base root")
    _run(["cp", "-a", str(base_dir / "root"), str(tree)], "cp -a")
    progress("image: guest files, initramfs")
    _install_guest_files(tree)
    init = (guest_dir() / "initramfs" / "init").read_bytes()
    kernel.write_initramfs(work / "initrd.img", kernel.KernelTree(tree, base.kernel_version), tree, init)
    progress("image: mkfs.ext4")
    _mkfs(tree, work / "root.ext4", "qlab-base")
    shutil.rmtree(tree)
    shutil.copy2(base_dir / "vmlinuz", work / "vmlinuz")
    key = dest.name.removeprefix("image-")
    manifest = QlabImage(
        key=key, base_key=base.key, dir=str(dest), kernel_version=base.kernel_version,
        kernel=str(dest / "vmlinuz"), initrd=str(dest / "initrd.img"), rootfs=str(dest / "root.ext4"),
        base_root=str(base_dir / "root"), packages=base.packages, requested=base.requested,
        host_key=base.host_key, client_key=str(base_dir / "keys" / "id_ed25519"),
        build_s={"base": base.build_s, "image": round(time.monotonic() - t0, 1)},
        built_at=datetime.now(UTC).isoformat(timespec="seconds"))
    (work / "manifest.json").write_text(manifest.model_dump_json(indent=2))
    work.rename(dest)
    return manifest


def ensure(progress: Progress = lambda _m: None) -> QlabImage:
    """The current guest image, built (base and/or image layer) if it is not cached yet."""
    cache = cache_dir()
    sources = debian.debian_sources()
    requested = requested_versions(progress)
    bkey = base_key(requested, sources)
    ikey = image_key(bkey)
    image_dir = cache / f"image-{ikey}"
    if (image_dir / "manifest.json").exists():
        return QlabImage.model_validate_json((image_dir / "manifest.json").read_text())
    _require_tools()
    base_dir = cache / f"base-{bkey}"
    with _locked(cache / "locks" / f"base-{bkey}", progress):
        if not (base_dir / "base.json").exists():
            build_base(base_dir, requested, sources, progress)
    base = BaseLayer.model_validate_json((base_dir / "base.json").read_text())
    with _locked(cache / "locks" / f"image-{ikey}", progress):
        if not (image_dir / "manifest.json").exists():
            build_image(image_dir, base_dir, base, progress)
    return QlabImage.model_validate_json((image_dir / "manifest.json").read_text())
