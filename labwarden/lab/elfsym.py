"""Where a function lives in an ELF file, as a uprobe wants it: a file offset.

Offset = symbol st_value - PT_LOAD p_vaddr + p_offset of the segment holding it. Read on the
host from a copy of the DUT's own file (never trusted from the DUT's tools).
"""

from __future__ import annotations

from pathlib import Path

from elftools.elf.elffile import ELFFile

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
        if dynsym is None:
            raise UprobeError(f"{elf_path} has no .dynsym")
        syms = dynsym.get_symbol_by_name(symbol)
        if not syms:
            raise UprobeError(f"{symbol} is not exported by {elf_path}")
        value = syms[0]["st_value"]
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_memsz"]:
                return value - seg["p_vaddr"] + seg["p_offset"]
    raise UprobeError(f"{symbol} at {value:#x} is in no PT_LOAD segment of {elf_path}")


