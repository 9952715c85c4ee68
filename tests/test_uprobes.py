"""uprobe offsets against binutils' own reading of the ELF, and perf stat's CSV parser."""

import re
import subprocess
from pathlib import Path

import pytest

from labwarden.lab import elfsym, perfcount

# perf stat -x, output as perf 6.1 prints it for two uprobes and one that did not count
PERF_CSV = """\
54,,labwarden:txn,3001744871,100.00,,
18,,labwarden:rpc,3001744871,100.00,,
<not counted>,,labwarden:idle,0,0.00,,
"""


def test_parse_perf_stat_csv() -> None:
    assert perfcount.parse_perf_stat_csv(PERF_CSV) == {
        "labwarden:txn": 54, "labwarden:rpc": 18, "labwarden:idle": 0}


def _readelf_offset(elf: Path, symbol: str) -> int:
    """Same computation from `readelf` text: st_value - p_vaddr + p_offset of its PT_LOAD."""
    syms = subprocess.run(["readelf", "-W", "--dyn-syms", str(elf)], capture_output=True,
                          text=True, check=True).stdout
    value = next(int(line.split()[1], 16) for line in syms.splitlines()
                 if line.split()[-1:] == [symbol])
    segs = subprocess.run(["readelf", "-W", "-l", str(elf)], capture_output=True, text=True,
                          check=True).stdout
    for line in segs.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, vaddr, memsz = int(f[1], 16), int(f[2], 16), int(f[5], 16)
            if vaddr <= value < vaddr + memsz:
                return value - vaddr + off
    raise AssertionError("no segment")


@pytest.mark.parametrize("symbol", ["dm_finalize_transaction", "getStationStats",
                                    "wld_ad_syncInfo"])
def test_offset_matches_readelf(built_firmware: Path, symbol: str) -> None:
    lib = built_firmware / "libsta.so"
    assert elfsym.dynsym_offset(lib, symbol) == _readelf_offset(lib, symbol)


def test_unknown_symbol_and_bad_names(built_firmware: Path) -> None:
    lib = built_firmware / "libsta.so"
    with pytest.raises(elfsym.UprobeError, match="not exported"):
        elfsym.dynsym_offset(lib, "no_such_function")
    with pytest.raises(elfsym.UprobeError, match="bad probe name"):
        perfcount.probe_line("x; rm -rf /", lib, 0x10)
    assert re.fullmatch(r"p:labwarden/txn \S+:0x[0-9a-f]+",
                        perfcount.probe_line("txn", lib, 0x1234))
