"""Diffs against the packaged vlab firmware, for tests that play an agent writing patches: the
text a file has with shipped patches applied (git apply in a copy), and a unified diff (a/ b/
names, as `git diff` writes) of one replacement in it."""

from __future__ import annotations

import difflib
import shutil
import subprocess
import tempfile
from pathlib import Path

from labwarden.vlab import firmware


def source(path: str, patches: tuple[str, ...] = ()) -> str:
    """A firmware file as it reads with these shipped patches applied (ids, e.g. "0902")."""
    if not patches:
        return (firmware.firmware_package_dir() / path).read_text()
    with tempfile.TemporaryDirectory(prefix="lw-src-") as tmp:
        tree = Path(tmp) / "fw"
        shutil.copytree(firmware.firmware_package_dir(), tree)
        for pid in patches:
            patch = next(firmware.patches_package_dir().glob(f"{pid}-*.patch"))
            subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True, capture_output=True)
        return (tree / path).read_text()


def change(path: str, old: str, new: str, patches: tuple[str, ...] = ()) -> str:
    """A unified diff of replacing `old` (which must occur) by `new` in one file."""
    text = source(path, patches)
    assert old in text, f"{path} no longer holds {old!r}"
    after = text.replace(old, new, 1)
    return "".join(difflib.unified_diff(text.splitlines(True), after.splitlines(True),
                                        f"a/{path}", f"b/{path}"))


BULK = ("int hal_has_bulk_capability(int vap)\n{\n\t(void)vap;\n\treturn 0;",
        "int hal_has_bulk_capability(int vap)\n{\n\t(void)vap;\n\treturn 1;")
"""hal.c: report the bulk capability, so the station pull takes hal_get_all_stations_bulk (one
dump per VAP instead of three round trips per station)."""
SLOW_MONITOR = ("interval_ms = atol(iv);", "interval_ms = 2 * atol(iv);")
"""stamon.c: poll half as often -- less work because less load, not a fix."""
DROP_KEY = ("for (int i = 1; i < 14; i++) {", "for (int i = 1; i < 13; i++) {")
"""wld.c on top of 0902: the brief reply loses its last key (TxUnicastPacketCount)."""
NO_OP = ("/* Volatile counters: written directly, every sample. */",
         "/* Volatile counters: written straight into the object, every sample. */")
"""wld.c: a comment -- the same code."""
BROKEN = ("wld_ad_syncStats(ad);", "wld_ad_syncStats(ad) /* the ; went missing */")
"""wld.c: does not compile."""
EFFECT_10 = ("\twork_us(COST_MARSHAL_US);",
             "\twork_us(COST_MARSHAL_US / 10); /* bench: a tenth of the formatting's cost */")
"""wld.c: the full reply's formatting costs a tenth of its calibrated work -- a ~10% effect of
known size (bench/trust.py's "real effect" on the vlab; stad ~3 ms a station a poll at 114, this
takes 333 us of it). Measured: -11.7% and -9.6% at 114 clients, both kept, on a quiet host
(`bench/trust.py --lab-kind vlab --noops 0 --effects 2 --background off`, 2026-11-29)."""
