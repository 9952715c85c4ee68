"""A newc cpio archive writer: the format the kernel unpacks as an initramfs (no cpio tool needed,
and device nodes such as /dev/console can be created without root)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import BinaryIO


class CpioWriter:
    """Append entries, then `close()` writes the trailer. Entries are written as given: parents
    must come before their children."""

    def __init__(self, out: BinaryIO, mtime: int = 0):
        self.out = out
        self.mtime = mtime
        self.ino = 0

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        self.ino += 1
        raw = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 1, self.mtime, len(data), 0, 0, rdev[0], rdev[1], len(raw), 0]
        self.out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + raw)
        self.out.write(b"\0" * (-(110 + len(raw)) % 4))
        self.out.write(data)
        self.out.write(b"\0" * (-len(data) % 4))

    def directory(self, name: str, perm: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | perm)

    def file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def copy(self, name: str, path: Path, perm: int | None = None) -> None:
        """A host file's content (symlinks followed) under `name`."""
        self.file(name, path.read_bytes(), perm if perm is not None else path.stat().st_mode & 0o777)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int, perm: int = 0o600) -> None:
        self._entry(name, stat.S_IFCHR | perm, rdev=(major, minor))

    def close(self) -> None:
        self._entry("TRAILER!!!", 0)
