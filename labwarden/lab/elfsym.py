"""Where a function lives in an ELF file, as a uprobe wants it: a file offset.

Offset = symbol st_value - PT_LOAD p_vaddr + p_offset of the segment holding it. Read on the
host from a copy of the DUT's own file (never trusted from the DUT's tools). The symbol may be
exported (.dynsym), in the file's .symtab, or only in its detached debug file (a stripped
image's static functions: the build's symfs keeps them under .build-id) -- any function the
build's symbols know; the segments are always the DUT file's own.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

from labwarden.core.errors import LabError


class UprobeError(LabError):
    """A probe that cannot be placed (unknown symbol, bad name or path)."""

    kind = "invalid_input"

    def __init__(self, problem: str, remedy: str = "check [target] uprobes in the lab profile"):
        super().__init__(problem, remedy)


def dynsym_offset(elf_path: Path, symbol: str) -> int:
    """File offset of an exported function, as uprobe_events wants it."""
    with elf_path.open("rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        if not isinstance(dynsym, SymbolTableSection):  # None, or NOBITS in a split debug file
            raise UprobeError(f"{elf_path} has no .dynsym")
        syms = dynsym.get_symbol_by_name(symbol)
        if not syms:
            raise UprobeError(f"{symbol} is not exported by {elf_path}")
        value: int = syms[0]["st_value"]
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_memsz"]:
                return value - seg["p_vaddr"] + seg["p_offset"]
    raise UprobeError(f"{symbol} at {value:#x} is in no PT_LOAD segment of {elf_path}")




def _functions(elf: ELFFile, symbol: str) -> set[int]:
    """Addresses of the defined functions named `symbol` in .dynsym and .symtab."""
    found: set[int] = set()
    for name in (".dynsym", ".symtab"):
        sec = elf.get_section_by_name(name)
        if not isinstance(sec, SymbolTableSection):
            continue
        for sym in sec.get_symbol_by_name(symbol) or []:
            if sym["st_shndx"] != "SHN_UNDEF" and sym["st_info"]["type"] in ("STT_FUNC",
                                                                            "STT_GNU_IFUNC"):
                found.add(int(sym["st_value"]))
    return found


def symbol_offset(elf_path: Path, symbol: str, debug_files: Sequence[Path] = ()) -> int:
    """File offset of function `symbol` in `elf_path`: from its own symbol tables, else from the
    first of `debug_files` that defines it (detached debug info of the same build). Raises
    UprobeError when no table knows it, or when two static functions share the name."""
    where = [str(elf_path)]
    with elf_path.open("rb") as f:
        elf = ELFFile(f)
        addrs = _functions(elf, symbol)
        for debug in debug_files:
            if addrs:
                break
            where.append(str(debug))
            with debug.open("rb") as g:
                addrs = _functions(ELFFile(g), symbol)
        if not addrs:
            raise UprobeError(f"no function {symbol!r} in {' or '.join(where)} (.dynsym, .symtab"
                              f"{', debug file' if debug_files else '; no debug file of this build'})",
                              "check [target] uprobes in the lab profile: the function must be in "
                              "the build the DUT runs (fingerprint_verify it first, so its symbols "
                              "are known)")
        if len(addrs) > 1:
            raise UprobeError(f"{symbol!r} names {len(addrs)} functions in {elf_path} (static "
                              "functions of different files)", "probe a function with a unique name")
        value = addrs.pop()
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_memsz"]:
                return int(value - seg["p_vaddr"] + seg["p_offset"])
    raise UprobeError(f"{symbol} at {value:#x} is in no PT_LOAD segment of {elf_path}")


def build_id(path: Path) -> str:
    """The ELF NT_GNU_BUILD_ID, hex ('' when there is none)."""
    with path.open("rb") as f:
        for section in ELFFile(f).iter_sections():
            if isinstance(section, NoteSection):  # pyelftools' class for SHT_NOTE
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return str(note["n_desc"])
    return ""


def build_id_from_head(head: bytes) -> str | None:
    """The NT_GNU_BUILD_ID of an ELF from its first bytes (the program headers' PT_NOTE segments,
    which a linker puts in the first page): hex, '' when the ELF has none in `head`, None when
    `head` is not an ELF. What fingerprint_verify reads of a running binary on the DUT."""
    if head[:4] != b"\x7fELF" or len(head) < 64:
        return None
    wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
    if wide:
        phoff, = struct.unpack_from(order + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
    else:
        phoff, = struct.unpack_from(order + "I", head, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + phentsize > len(head):
            break
        p_type, = struct.unpack_from(order + "I", head, at)
        if p_type != 4:  # PT_NOTE
            continue
        if wide:
            off, = struct.unpack_from(order + "Q", head, at + 8)
            size, = struct.unpack_from(order + "Q", head, at + 32)
        else:
            off, = struct.unpack_from(order + "I", head, at + 4)
            size, = struct.unpack_from(order + "I", head, at + 16)
        pos, end = off, min(off + size, len(head))
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from(order + "III", head, pos)
            name_at = pos + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            if ntype == 3 and head[name_at:name_at + namesz].rstrip(b"\0") == b"GNU":
                return head[desc_at:desc_at + descsz].hex()
            pos = desc_at + ((descsz + 3) & ~3)
    return ""


def debug_files(elf_path: Path, symfs_roots: Sequence[Path]) -> list[Path]:
    """The detached debug files of `elf_path`'s build-id under each symfs root (perf's layout:
    usr/lib/debug/.build-id/xx/rest.debug), those that exist."""
    bid = build_id(elf_path)
    if not bid:
        return []
    rel = Path("usr/lib/debug/.build-id") / bid[:2] / f"{bid[2:]}.debug"
    return [root / rel for root in symfs_roots if (root / rel).is_file()]
