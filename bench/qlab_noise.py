"""The qlab's measurement noise at 114 stations, per guest clock, side by side in one run: for
each configuration a qlab is brought up on that clock (`qlab up --clock ...`), 114 real stations
are associated, and stad's CPU% is measured over N windows of W guest seconds -- once on the host
as it is, once with one `yes > /dev/null` started by this script -- by the two counters the guest
offers for the same windows: utime+stime ticks (/proc/PID/stat, what the sampler reads) and the
scheduler's nanoseconds (/proc/PID/schedstat). Printed per row: the mean, sd and sd/mean of the
windows, the real seconds a window took, and the host's load average before and after the pass.
Boot and association times per clock are printed too (icount makes TCG single-threaded).
Target: sd/mean <= 2% quiet, <= 3% with the `yes`.

    .venv/bin/python bench/qlab_noise.py [--configs realtime@2 icount@1] [--windows 8]
        [--window 4 10] [--stations 114] [--settle 5] [--passes quiet yes]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.lab.procfs import parse_stat
from labwarden.qlab import control, guestssh, stations
from labwarden.qlab.layout import QlabLayout

QUIET_MAX, LOADED_MAX = 2.0, 3.0

# $1 windows, $2 seconds each, after $3 seconds of settling (the stations' first syncs, as the
# profile's settle_s keeps them out of a measurement's windows): n+1 samples
# "S uptime schedstat-ns guest-idle-ticks stat-after-')'"
WINDOWS_SH = r"""
pid=$(cat /run/stad.pid); n=$1; w=$2; i=0
sleep "$3"
while :; do
  read -r up _ < /proc/uptime
  read -r st < "/proc/$pid/stat"
  read -r ns _ < "/proc/$pid/schedstat"
  read -r _ _ _ _ idle _ < /proc/stat
  echo "S $up $ns $idle ${st#*) }"
  [ "$i" -ge "$n" ] && break
  i=$((i+1)); sleep "$w"
done
"""


@dataclass
class Pass:
    clock: str
    load: str
    window: float
    ticks: list[float] = field(default_factory=list)
    sched: list[float] = field(default_factory=list)
    idle: list[float] = field(default_factory=list)
    real_s: float = 0.0
    guest_s: float = 0.0
    loadavg: tuple[str, str] = ("", "")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def windows(ep: object, clock: str, load: str, n: int, w: float, clk_tck: int,
            settle: float) -> Pass:
    p = Pass(clock, load, w)
    before = loadavg()
    t0 = time.monotonic()
    res = guestssh.run_sync(ep, ["sh", "-c", WINDOWS_SH, "noise", str(n), str(w), str(settle)],  # type: ignore[arg-type]
                            timeout=n * w * 20 + 120)
    p.real_s = (time.monotonic() - t0) / (n + settle / w)
    p.loadavg = (before, loadavg())
    if not res.ok:
        raise RuntimeError(f"the window script failed: {res.stderr[-300:]}")
    samples = []
    for line in res.stdout.splitlines():
        if line.startswith("S "):
            _, up, ns, idle, rest = line.split(" ", 4)
            st = parse_stat(f"0 (x) {rest}")
            samples.append((float(up), int(ns), st.utime + st.stime, int(idle)))
    for (t_a, ns_a, tk_a, id_a), (t_b, ns_b, tk_b, id_b) in itertools.pairwise(samples):
        dt = t_b - t_a
        p.idle.append(100.0 * (id_b - id_a) / clk_tck / dt)
        p.ticks.append(100.0 * (tk_b - tk_a) / clk_tck / dt)
        p.sched.append(100.0 * (ns_b - ns_a) / 1e9 / dt)
    p.guest_s = (samples[-1][0] - samples[0][0]) / n
    return p


def spread(xs: list[float]) -> tuple[float, float, float]:
    mean, sd = statistics.fmean(xs), statistics.stdev(xs)
    return mean, sd, 100.0 * sd / mean


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=["realtime@2", "icount@1"],
                    help="CLOCK@VCPUS: a guest clock (`qlab up --clock`) and -smp; one qlab each")
    ap.add_argument("--passes", nargs="+", choices=["quiet", "yes"], default=["quiet", "yes"])
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--window", type=float, nargs="+", default=[4.0, 10.0],
                    help="guest seconds per window (each length is a pass of its own)")
    ap.add_argument("--stations", type=int, default=114)
    ap.add_argument("--settle", type=float, default=5.0,
                    help="guest seconds before each pass's first window")
    args = ap.parse_args()
    console = Console(width=200)
    passes: list[Pass] = []
    ups: list[list[str]] = []
    for config in args.configs:
        clock, _, vcpus = config.partition("@")
        smp = int(vcpus or 2)
        root = Path(tempfile.mkdtemp(prefix="qlab-noise-"))
        try:
            la = loadavg()
            info = control.up(root, clock=clock, smp=smp,
                              progress=lambda m: console.print(f"[dim]{m}[/dim]"))
            ep = control.endpoint(QlabLayout.at(root))
            clk = int(guestssh.run_sync(ep, ["getconf", "CLK_TCK"]).stdout.strip() or 100)
            held = stations.associate(ep, args.stations)
            name = f"{info.clock.spec} -smp {smp}"
            ups.append([name, f"{info.timings['boot']:.1f}", f"{info.timings['wifi']:.1f}",
                        f"{held.seconds:.1f}", la])
            console.print(" | ".join(ups[-1]))
            for load in args.passes:
                yes = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if load == "yes" else None
                try:
                    if yes is not None:
                        time.sleep(2)
                    for w in args.window:
                        passes.append(windows(ep, name, load, args.windows, w, clk, args.settle))
                        p = passes[-1]
                        console.print(f"{p.clock} {p.load} {w:g} s: ticks "
                                      f"{' '.join(f'{x:.2f}' for x in p.ticks)}; "
                                      f"schedstat {' '.join(f'{x:.2f}' for x in p.sched)}; "
                                      f"load {p.loadavg}")
                finally:
                    if yes is not None:
                        yes.kill()
                        yes.wait()
        finally:
            control.down(root)
    table = Table("clock", "host", "window", "counter", "mean %", "sd pp", "sd / mean",
                  "guest idle % (all vCPUs)",
                  "real s / window",
                  "host load avg before -> after",
                  title=f"qlab: stad CPU at {args.stations} stations, {args.windows} windows per "
                  "row (2-core host)")
    ok = True
    for p in passes:
        for counter, xs in (("ticks", p.ticks), ("schedstat ns", p.sched)):
            mean, sd, rel = spread(xs)
            limit = QUIET_MAX if p.load == "quiet" else LOADED_MAX
            if counter == "ticks" and p.clock == passes[-1].clock:
                ok &= rel <= limit
            table.add_row(p.clock, "quiet" if p.load == "quiet" else "+ yes", f"{p.window:g} s",
                          counter, f"{mean:.2f}", f"{sd:.2f}",
                          f"[{'green' if rel <= limit else 'red'}]{rel:.1f}%[/]",
                          f"{statistics.fmean(p.idle):.0f}",
                          f"{p.real_s:.1f} ({p.guest_s:.1f} guest)", f"{p.loadavg[0]} -> {p.loadavg[1]}")
    console.print(table)
    boot = Table("clock", "boot s (ssh answers)", "APs up s", f"associate {args.stations} s",
                 "host load avg at up", title="qlab up and association per clock")
    for row in ups:
        boot.add_row(*row)
    console.print(boot)
    console.print(f"target: sd/mean <= {QUIET_MAX:g}% quiet, <= {LOADED_MAX:g}% with one `yes` "
                  f"(the last clock's ticks, as the sampler reads them); pid {os.getpid()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
