"""symbolize on a 60 s perf.data of stad at 114 stations, against its floor, in one run.

- floor:   `perf script` (FACTS' fast flags) | inferno-collapse-perf, same file, same symfs
- default: `perf script` with default options | inferno-collapse-perf, same file, same symfs
- tool:    the `symbolize` tool through the runner, result cache cleared (the symcache of system
           libraries kept warm: they are fetched once per build-id, ever): recorded mappings,
           symfs, folded, SVG, hot-path tree
- cached:  the tool again on the same perf.data (hash memo, cache hit, tree from the folded file)

The stations are released after the recording so stad's load does not skew the timings.

Each row is the median of N runs, interleaved; ratios are against the floor's median.

    .venv/bin/python bench/symbolize.py [--seconds 60] [-n 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.host import symfs as sf
from labwarden.lab.host.binaries import which
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout
from tests.test_symbolize import record_profile


def _pipe(argv: list[str], out: Path) -> float:
    t0 = time.perf_counter()
    sf.collapse(argv, which("inferno-collapse-perf") or "", out, out.with_suffix(".err"))
    return time.perf_counter() - t0


async def bench(layout: VlabLayout, seconds: int, n: int, console: Console) -> None:
    prof = LabProfile.from_file(layout.lab_toml)
    console.print(f"recording {seconds} s of stad at 114 stations ...")
    rid = record_profile(layout, prof.build.baseline or "", 114, seconds, buildid_mmap=False)
    control.associate(layout.root, 0)  # quiet the 2-core host: stad at 114 stations burns CPU
    store = RecordStore(layout.data_dir)
    perf_data = store.artifact_dir(rid) / "rep0.perf.data"
    kallsyms = store.artifact_dir(rid) / "kallsyms"
    cache = layout.data_dir / "symbolized"
    work = Path(tempfile.mkdtemp(prefix="symbench-"))
    times: dict[str, list[float]] = {"floor": [], "default": [], "tool": [], "cached": []}
    async with open_lab(prof) as ctx:
        t0 = time.perf_counter()
        first = await call_tool(ctx, "symbolize", {"profile_id": rid})
        first_s = time.perf_counter() - t0
        assert first.ok and first.result, first.error
        res = first.result
        symfs = Path(res["symfs"])
        shutil.copytree(symfs, work / "symfs", symlinks=True)  # survives clearing the cache
        empty = work / "empty"
        empty.mkdir()
        fast = sf.script_argv("perf", perf_data, work / "symfs", kallsyms, empty)
        slow = sf.script_argv("perf", perf_data, work / "symfs", kallsyms, empty, fast=False)

        async def tool() -> float:
            shutil.rmtree(cache)
            rec = await call_tool(ctx, "symbolize", {"profile_id": rid})
            assert rec.ok and rec.result and not rec.result["cached"], rec.error
            return rec.duration_s

        async def cached() -> float:
            rec = await call_tool(ctx, "symbolize", {"profile_id": rid})
            assert rec.ok and rec.result and rec.result["cached"]
            return rec.duration_s

        runs: list[tuple[str, Callable[[], object]]] = [
            ("floor", lambda: _pipe(fast, work / "floor.folded")),
            ("default", lambda: _pipe(slow, work / "default.folded")),
        ]
        for i in range(n):
            console.print(f"round {i + 1}/{n}")
            for name, fn in runs:
                times[name].append(float(fn()))  # type: ignore[arg-type]
            times["tool"].append(await tool())
            times["cached"].append(await cached())
        same = (work / "floor.folded").read_bytes() == Path(res["folded"]).read_bytes()
    med = {k: statistics.median(v) for k, v in times.items()}
    table = Table(title=f"symbolize: {seconds} s perf.data ({perf_data.stat().st_size / 1e6:.1f} MB,"
                  f" {res['samples']} samples), median of {n}")
    table.add_column("pipeline")
    table.add_column("median s", justify="right")
    table.add_column("min..max s", justify="right")
    table.add_column("x floor", justify="right")
    labels = {"floor": "floor: perf script -F ... --no-inline | collapse",
              "default": "perf script (default options) | collapse",
              "tool": "symbolize tool, uncached (folded + SVG + tree)",
              "cached": "symbolize tool, cached re-symbolize"}
    for k, v in times.items():
        table.add_row(labels[k], f"{med[k]:.3f}", f"{min(v):.3f}..{max(v):.3f}",
                      f"{med[k] / med['floor']:.2f}x")
    console.print(table)
    console.print(f"first-ever run (symcache cold: system libraries + debug files fetched by SFTP): "
                  f"{first.duration_s:.3f} s in the runner ({first_s:.3f} s wall)")
    console.print(f"folded byte-identical to the floor's: {same}; unknown_pct {res['unknown_pct']}%;"
                  f" dominant {res['dominant_path'][-1]}")
    target = med["tool"] <= 1.15 * med["floor"] and med["cached"] <= 0.05
    console.print(f"target (tool <= 1.15x floor, cached <= 50 ms): {'met' if target else 'NOT met'}")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--dir", help="vlab state dir (default: a temp dir, removed after)")
    args = ap.parse_args()
    console = Console()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="symbench-vlab-"))
    perf = subprocess.run(["perf", "--version"], capture_output=True, text=True).stdout.strip()
    console.print(f"{perf}; {os.cpu_count()} CPUs; vlab {root}")
    try:
        control.up(root)
        asyncio.run(bench(VlabLayout.at(root), args.seconds, args.n, console))
    finally:
        control.down(root)
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
