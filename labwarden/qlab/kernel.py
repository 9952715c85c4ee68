"""The guest's kernel from Debian's linux-image package: the kernel image, the modules the qlab
needs (with everything they depend on), and a small initramfs.

Debian builds virtio, ext4 and overlayfs as modules, so the kernel cannot mount a root disk by
itself: a ~3 MB initramfs (busybox, its two libraries, a dozen modules, `init`) loads them and
mounts the root. A big generic initramfs would take ~15 s to unpack under TCG; this one does not.
Only the modules the qlab uses are copied into the root (the package holds ~390 MB of them).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from labwarden.qlab.cpio import CpioWriter

RUNTIME_MODULES = (
    "mac80211_hwsim",                                            # the radios
    "virtio_net", "virtio_blk", "virtio_pci", "virtio_rng",      # QEMU's devices
    "ext4", "overlay", "crc32c_generic", "crc32c_intel", "loop",
    "wireguard", "tun", "veth", "dummy", "bridge", "8021q",      # the traffic variant ([2/6])
)
"""Modules (by name) the guest root gets, with their dependencies."""

RUNTIME_GLOBS = ("kernel/net/netfilter/*", "kernel/net/ipv4/netfilter/*",
                 "kernel/net/ipv6/netfilter/*", "kernel/net/sched/*")
"""Whole module directories: nftables' expressions and tc's qdiscs are loaded on demand."""

INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "overlay", "loop")
"""What the initramfs loads before it can mount the root (dependencies come first)."""


@dataclass(frozen=True)
class KernelTree:
    """An unpacked linux-image package."""

    root: Path
    version: str

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.version}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.version


def unpack(deb: Path, dest: Path) -> KernelTree:
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True, capture_output=True)
    versions = sorted(p.name for p in (dest / "lib" / "modules").iterdir())
    if len(versions) != 1:
        raise RuntimeError(f"{deb.name}: expected one kernel version, found {versions}")
    return KernelTree(dest, versions[0])


def _name(path: Path) -> str:
    return path.name.removesuffix(".ko").replace("-", "_")


def module_index(tree: KernelTree) -> dict[str, Path]:
    """Module name -> its .ko path relative to the modules dir."""
    return {_name(p): p.relative_to(tree.modules) for p in tree.modules.rglob("*.ko")}


def depends(path: Path) -> list[str]:
    """The `depends=` of a module's .modinfo (what modpost found it needs)."""
    with path.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".modinfo")
        data = section.data() if section is not None else b""
    for item in data.split(b"\0"):
        if item.startswith(b"depends="):
            return [d.replace("-", "_") for d in item[8:].decode().split(",") if d]
    return []


def load_order(tree: KernelTree, index: dict[str, Path], wanted: list[str]) -> list[str]:
    """`wanted` and everything they depend on, each module after its dependencies."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in seen:
            return
        if name not in index:
            raise RuntimeError(f"module {name} (needed by {' <- '.join(chain) or 'the qlab'}) "
                               f"is not in kernel {tree.version}")
        seen.add(name)
        for dep in depends(tree.modules / index[name]):
            visit(dep, (name, *chain))
        order.append(name)

    for name in wanted:
        visit(name, ())
    return order


def runtime_modules(tree: KernelTree, index: dict[str, Path]) -> list[str]:
    wanted = list(RUNTIME_MODULES)
    for name, rel in sorted(index.items()):
        if any(fnmatch.fnmatch(str(rel), g) for g in RUNTIME_GLOBS):
            wanted.append(name)
    return load_order(tree, index, wanted)


def install_modules(tree: KernelTree, root: Path) -> list[str]:
    """Copy the runtime modules into `root`'s /lib/modules/VERSION and run the guest's depmod."""
    index = module_index(tree)
    names = runtime_modules(tree, index)
    dest = root / "lib" / "modules" / tree.version
    if dest.exists():
        shutil.rmtree(dest)
    for name in names:
        (dest / index[name]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree.modules / index[name], dest / index[name])
    for meta in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        if (tree.modules / meta).exists():
            shutil.copy2(tree.modules / meta, dest / meta)
    subprocess.run(["chroot", str(root), "depmod", "-a", tree.version], check=True,
                   capture_output=True)
    return names


def in_root(root: Path, path: str) -> Path:
    """`path` inside a guest root, following the guest's symlinks (absolute ones included) without
    ever leaving the root for the host's files."""
    current = root
    parts = [p for p in path.split("/") if p]
    hops = 0
    while parts:
        part = parts.pop(0)
        nxt = current / part
        if nxt.is_symlink():
            hops += 1
            if hops > 40:
                raise RuntimeError(f"symlink loop at {path} in {root}")
            target = os.readlink(nxt)
            if target.startswith("/"):
                current = root
            parts = [p for p in target.split("/") if p] + parts
            continue
        current = current.parent if part == ".." else nxt
    return current


def _libraries(root: Path, binary: str) -> list[str]:
    """DT_NEEDED of a guest binary resolved in the guest root (one level: busybox's are leaves)."""
    with in_root(root, binary).open("rb") as f:
        dynamic = ELFFile(f).get_section_by_name(".dynamic")
        # pyelftools sets a DT_NEEDED tag's .needed with setattr, so its stubs cannot name it
        needed = ([t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]  # type: ignore[attr-defined]
                  if isinstance(dynamic, DynamicSection) else [])
    return [f"/lib/x86_64-linux-gnu/{n}" for n in needed]


def write_initramfs(path: Path, tree: KernelTree, root: Path, init_script: bytes) -> list[str]:
    """A newc initramfs with the guest root's busybox, the mount modules and `init_script`.
    Returns the modules it loads, in order."""
    index = module_index(tree)
    order = load_order(tree, index, list(INITRAMFS_MODULES))
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        cpio = CpioWriter(f)
        for d in ("bin", "dev", "proc", "sys", "lib", "lib/x86_64-linux-gnu", "lib64", "modules",
                  "rom", "rom/base", "rom/fw", "overlay", "newroot"):
            cpio.directory(d)
        cpio.chardev("dev/console", 5, 1)
        cpio.chardev("dev/null", 1, 3, 0o666)
        cpio.copy("bin/busybox", in_root(root, "/bin/busybox"), 0o755)
        cpio.symlink("bin/sh", "busybox")
        for lib in _libraries(root, "/bin/busybox"):
            cpio.copy(lib.lstrip("/"), in_root(root, lib), 0o755)
        cpio.copy("lib64/ld-linux-x86-64.so.2", in_root(root, "/lib64/ld-linux-x86-64.so.2"), 0o755)
        for i, name in enumerate(order):
            cpio.copy(f"modules/{i:02d}-{name}.ko", tree.modules / index[name], 0o644)
        cpio.file("init", init_script, 0o755)
        cpio.close()
    tmp.replace(path)
    return order
