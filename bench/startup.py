"""CLI start-up, measured side by side in one run: `labwarden version`, `labwarden --help` and
`labwarden call lab_status` against `python -c pass`, and the call against the tool's own
duration (the `duration_s` of its record). Targets: version and --help <= 0.3 s; a call adds
<= 0.5 s to the tool's duration. Each command runs as a user runs it (a fresh process), the
commands interleaved round by round so a noisy moment hits each alike.

    .venv/bin/python bench/startup.py [-n 10] [--lab LAB_TOML]   # default: a vlab brought up here
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

BIN = Path(sys.executable).parent
TARGET_S = {"labwarden version": 0.3, "labwarden --help": 0.3}
CALL_OVER_S = 0.5


def timed(argv: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True,
                          env={**os.environ, "COLUMNS": "100"})
    return time.perf_counter() - t, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--lab", type=Path)
    args = ap.parse_args()
    root = None
    if args.lab is None:
        from labwarden.vlab import control

        root = Path(tempfile.mkdtemp(prefix="lw-startup-")) / "vlab"
        control.up(root)
        lab = root / "lab.toml"
    else:
        lab = args.lab
    lw = str(BIN / "labwarden")
    rows: dict[str, list[float]] = {k: [] for k in (
        "python -c pass", "labwarden version", "labwarden --help", "labwarden call lab_status",
        "  its tool's own duration")}
    try:
        timed([lw, "version"])  # warm the page cache and the bytecode
        for _ in range(args.n):
            rows["python -c pass"].append(timed([sys.executable, "-c", "pass"])[0])
            rows["labwarden version"].append(timed([lw, "version"])[0])
            rows["labwarden --help"].append(timed([lw, "--help"])[0])
            took, text = timed([lw, "call", "lab_status", "--lab", str(lab), "--json"])
            rows["labwarden call lab_status"].append(took)
            rows["  its tool's own duration"].append(json.loads(text)["duration_s"])
    finally:
        if root is not None:
            from labwarden.vlab import control

            control.down(root)
    med = {k: statistics.median(v) for k, v in rows.items()}
    table = Table(title=f"CLI start-up, {args.n} runs each, interleaved (s)")
    for col in ("command", "median", "min", "max", "x python -c pass"):
        table.add_column(col, justify="left" if col == "command" else "right")
    for label, xs in rows.items():
        table.add_row(label, f"{med[label]:.3f}", f"{min(xs):.3f}", f"{max(xs):.3f}",
                      f"{med[label] / med['python -c pass']:.1f}")
    console = Console(width=120)
    console.print(table)
    for label, target in TARGET_S.items():
        console.print(f"{label}: {med[label]:.3f} s (target <= {target:g} s): "
                      f"{'met' if med[label] <= target else 'NOT met'}")
    over = [c - d for c, d in zip(rows["labwarden call lab_status"],
                                  rows["  its tool's own duration"], strict=True)]
    added = statistics.median(over)
    console.print(f"labwarden call lab_status adds {added:.3f} s to the tool's own "
                  f"{med['  its tool' + chr(39) + 's own duration']:.3f} s (target <= "
                  f"{CALL_OVER_S:g} s): {'met' if added <= CALL_OVER_S else 'NOT met'}")


if __name__ == "__main__":
    main()
