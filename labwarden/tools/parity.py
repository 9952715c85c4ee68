"""The two A/B parity gates (a helper of experiment, sweep and gate_check; not a tool):

- offered-load parity: the profile's offered-load counter (on the vlab, the monitor's RPC
  calls/s) on B not below A's by more than the profile's tolerance -- a drop is valid only if
  it is not less work (seed 000: "getStationStats/win ~180 -- the drop is the lever, not less
  work"). Each side's rate is the mean of its per-window rates, and the tolerance is never finer
  than the counter can resolve: one call more or less in a window (a poll cut by the window's
  edge) is 1/window_s calls/s -- 8% of 6/s in a 2 s window, so a bare 5% would drop a candidate
  for the edge of a window, not for a changed load. More load on B passes: it cannot explain
  less CPU on B, so an improvement measured under it is conservative, never a cheat. It can come
  from a window edge that takes in part of one more polling cycle (six polls, one per VAP: the
  qlab at 114 read 6.03 -> 6.33 and 6.00 -> 6.50 calls/s, B above the monitor's own 6/s, and
  the two-sided gate dropped both improved candidates), and from the monitor being a closed
  loop when it overruns (stamon.c restarts its cadence after a late cycle: a slow A polls less).
  The same edge on A's side (A above its own cadence in one window) is no drop of B's: the
  tolerance is never finer than two standard errors of the difference of the two means either,
  from A's scatter per window (B's could be widened by the patch under test);
- functional parity: the profile's DUT-side check (`[decision] parity_check`), run with the
  clients held, must print the same on A and B (e.g. the stats replies' keys, and the brief
  reply's values equal to the full one's).
"""

from __future__ import annotations

import statistics

from labwarden.core.devtext import clean, quote
from labwarden.core.experiments import Gate
from labwarden.core.measurements import MeasurementRecord
from labwarden.lab.config import DecisionSection
from labwarden.tools.context import LabContext


async def check_output(ctx: LabContext) -> str | None:
    """The declared parity check's output (exit status first), or None when none is declared."""
    argv = ctx.profile.decision.parity_check
    if not argv:
        return None
    res = await ctx.device.exec(argv, timeout=30)
    text = "\n".join((f"exit {res.exit_status}", res.stdout + res.stderr))
    return clean(text.rstrip(), 4000)  # stored as device text: cleaned, quoted where shown


def functional(a: str | None, b: str | None) -> Gate:
    if a is None and b is None:
        return Gate.not_applicable("declared_parity", "no check declared ([decision] "
                                   "parity_check is empty)")
    if a is None or b is None:
        return Gate.judged("declared_parity", False,
                           f"the check ran on {'B' if a is None else 'A'} only")
    if a == b:
        lines = a.splitlines()
        return Gate.judged("declared_parity", True,
                           f"A and B print the same ({len(lines)} lines): "
                           + quote(" | ".join(ln[:80] for ln in lines[:3])))
    la, lb = a.splitlines(), b.splitlines()
    i = next((k for k in range(max(len(la), len(lb)))
              if (la[k] if k < len(la) else None) != (lb[k] if k < len(lb) else None)), 0)
    line_a = la[i] if i < len(la) else ""
    line_b = lb[i] if i < len(lb) else ""
    words_a, words_b = line_a.split(), line_b.split()
    only_a = [w for w in words_a if w not in words_b]
    only_b = [w for w in words_b if w not in words_a]
    if only_a or only_b:  # name what changed, not two long lines that look alike
        what = (f"only on A: {quote(' '.join(only_a[:6]) or '-')}; "
                f"only on B: {quote(' '.join(only_b[:6]) or '-')}")
    else:
        what = f"A {quote(line_a[:120])}, B {quote(line_b[:120])}"
    label = quote(line_a.split(":", 1)[0][:40]) if ":" in line_a else ""
    return Gate.judged("declared_parity", False,
                       f"line {i + 1}{f' ({label})' if label else ''} differs -- {what}")


def rate(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def window_loads(profiles: list[MeasurementRecord], counter: str) -> list[float]:
    """Per-window rates of `counter`, leaving out windows that recorded perf when others did not:
    the profiler is work of its own on the DUT, and on a small one (the qlab's single vCPU at 114
    stations) it made the monitor's polls overrun their cadence -- 5.25 calls/s in the perf
    window against 6.0-6.4 in the others, on an unchanged build. Such a window measures perf,
    not the patch's offered load."""
    windows = [w for p in profiles for w in p.windows if counter in w.counters]
    plain = [w for w in windows if w.perf_data is None]
    return [w.counters[counter] for w in (plain or windows)]


def offered_load(dec: DecisionSection, a: list[float], b: list[float],
                 window_s: float | None = None) -> Gate:
    """`a`, `b`: per-window rates (calls/s) of windows `window_s` long (default: the rule's)."""
    counter, tol = dec.offered_load_counter, dec.offered_load_tolerance_pct
    if counter is None:
        return Gate.not_applicable("offered_load_parity", "no offered-load counter declared "
                                   "([decision] offered_load_counter)")
    ra, rb = rate(a), rate(b)
    if ra is None or rb is None or ra <= 0:
        side = "A" if not a else "B" if not b else "A (zero)"
        return Gate.judged("offered_load_parity", False,
                           f"{counter} not measured on {side}: the offered load cannot be "
                           "shown equal (uprobe counters off or unavailable?)")
    change = 100.0 * (rb - ra) / ra
    resolution = 100.0 / ((window_s or dec.window_s) * ra)  # one call per window, % of A's rate
    # A's windows' own scatter (an edge taking in part of one more polling cycle: the vlab's
    # drift bench read A 6.0 and 6.75 calls/s, B 6.0 and 6.0, and the bare tolerance dropped a
    # real -11% for it): two standard errors of the difference of the means, from A's spread per
    # window -- A's alone, which no patch can widen -- so it narrows as windows are added
    spread = 0.0
    if len(a) > 1:
        spread = 200.0 * statistics.stdev(a) * (1 / len(a) + 1 / len(b)) ** 0.5 / ra
    allowed = max(tol, resolution, spread)
    ok = change >= -allowed  # only less work on B can fake a drop (module docstring)
    floor = f" (A's windows' own scatter: {spread:.1f}%)" if spread > max(tol, resolution) else \
        f" (one call a window: {resolution:.1f}%)" if resolution > tol else ""
    more = "; more on B: the drop was measured under more work" if change > allowed else ""
    return Gate.judged("offered_load_parity", ok,
                       f"{counter} {ra:.2f}/s -> {rb:.2f}/s ({change:+.1f}%, mean of "
                       f"{len(a)}/{len(b)} windows; B may fall at most {allowed:.1f}% below "
                       f"A{floor}{more})")
