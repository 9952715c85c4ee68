"""The report's plots as inline SVG (matplotlib, no display): CPU vs the workload per stage, and
for traffic studies throughput and the DUT's CPU vs offered load, and delivered vs offered
packet rate per saturation search."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: a report is rendered where no display exists
import matplotlib.pyplot as plt

from labwarden.core.experiments import Experiment
from labwarden.report.data import Stage
from labwarden.results.saturate import SaturateOutput
from labwarden.results.traffic_sweep import TrafficSweepOutput


def curves_svg(stages: list[Stage], axis: str | None = "clients") -> str:
    """CPU per stage over the workload points (`axis`: what they count; None: one point, the
    DUT's own workload). With one workload point there is no curve to draw: each stage is a bar
    with its spread (points_svg), not a line over a degenerate x axis."""
    if len({p.stations for st in stages for p in st.sweep.points}) == 1:
        return points_svg(stages, axis)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for st in stages:
        xs = [p.stations for p in st.sweep.points]
        ys = [p.cpu_mean for p in st.sweep.points]
        es = [p.cpu_stdev for p in st.sweep.points]
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=st.label)
    ax.set_xlabel(axis or "the DUT's own workload (no load axis)")
    ax.set_ylabel("target CPU, % of one core")
    ax.set_title(f"CPU {'vs ' + axis if axis else 'at its own workload'}, per stage "
                 "(mean ± stdev over reps)")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    if stages:
        ax.legend(fontsize=8)
    return _svg(fig)


def points_svg(stages: list[Stage], axis: str | None = "clients") -> str:
    """One workload point: a bar per stage (A, B, ...) at its mean CPU, the error bar its
    stdev over reps and the value written on it; the x axis names the stages."""
    pts = [(st.label, p) for st in stages for p in st.sweep.points]
    n = pts[0][1].stations if pts else 0
    where = f"{n} {axis}" if axis else "the DUT's own workload"
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(pts) + 2), 4.5), dpi=100)
    xs = list(range(len(pts)))
    ys = [p.cpu_mean for _, p in pts]
    es = [p.cpu_stdev for _, p in pts]
    palette = ["C0", "C2", "C4", "C9", "C5", "C7", "C8"]  # no orange or red: those are the
    colors = [palette[i % len(palette)] for i in xs]  # flame graphs' (and a failed gate's)
    ax.bar(xs, ys, yerr=es, capsize=6, color=colors, alpha=0.8, width=0.6)
    for x, y, e in zip(xs, ys, es, strict=True):
        ax.annotate(f"{y:.2f} ± {e:.2f}", (x, y + e), textcoords="offset points", xytext=(0, 4),
                    ha="center", fontsize=8)
    ax.set_xticks(xs, [label for label, _ in pts], rotation=15 if len(pts) > 3 else 0, fontsize=8)
    ax.set_xlim(-0.6, max(len(pts) - 0.4, 0.6))
    ax.set_xlabel(f"stage (one workload point: {where})")
    ax.set_ylabel("target CPU, % of one core")
    ax.set_title(f"CPU at {where}, per stage (mean ± stdev over reps)")
    ax.grid(alpha=0.3, axis="y")
    ax.set_ylim(bottom=0, top=max([y + e for y, e in zip(ys, es, strict=True)] or [1.0]) * 1.18)
    return _svg(fig)


def judged_svg(experiments: list[Experiment]) -> str:
    """What the rule saw for each screened candidate, at its one workload point: B against A as
    Δ % with the interval its verdict rests on (the CI, or for "same" the equivalence
    interval), the ±margin band of "same" shaded, and each decision written beside it."""
    rows = [x for x in experiments if x.screening is not None and x.screening.looks]
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.7 * max(len(rows), 1)), dpi=100)
    margin = 0.0
    for i, x in enumerate(rows):
        assert x.screening is not None
        lk = x.screening.final
        margin = max(margin, lk.margin_pct)
        iv = lk.deciding_interval()
        color = {"kept": "#17702d", "dropped": "#b3261e"}.get(x.decision, "#555")
        if iv is not None:
            ax.plot(iv, [i, i], color=color, linewidth=2.5, solid_capstyle="butt")
        ax.plot([lk.delta_pct], [i], "o", color=color)
        ax.text(0.01, i - 0.28, f"{x.decision}: {lk.verdict} {lk.delta_pct:+.1f}% "
                f"(A {lk.mean_a:.2f}, B {lk.mean_b:.2f}; {lk.n_a}+{lk.n_b} windows)",
                transform=ax.get_yaxis_transform(), ha="left", va="bottom", fontsize=7.5,
                color=color)  # inside the axes, above its row, whatever the numbers
    if margin:
        ax.axvspan(-margin, margin, color="#999", alpha=0.15, label=f"'same' band ±{margin:g}%")
        ax.legend(fontsize=8, loc="lower right")
    ax.axvline(0, color="#333", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [x.patch_name or x.patch for x in rows], fontsize=8)
    ax.set_ylim(-0.7, max(len(rows) - 0.3, 0.7))
    ax.invert_yaxis()
    where = rows[0].screening.workload if rows and rows[0].screening else None
    metric = rows[0].screening.metric if rows and rows[0].screening else "cpu"
    ax.set_xlabel(f"B vs A, Δ % of {'target CPU' if metric == 'cpu' else metric} "
                  "(bar: the interval the verdict rests on)")
    ax.set_title("what the rule decided" + (f" at {where}" if where else "")
                 + ": each candidate against its base")
    ax.grid(alpha=0.3, axis="x")
    return _svg(fig)


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prolog: it is inlined in HTML


def traffic_label(t: TrafficSweepOutput) -> str:
    """What one traffic_sweep was: its label, protocol, direction and length."""
    what = f"{t.proto} {t.direction}" + (f" {t.length} B" if t.length else "")
    return f"{t.label} ({what})" if t.label else what


def traffic_svg(sweeps: list[TrafficSweepOutput]) -> str:
    """Throughput and the DUT's busiest core (softirq + system) against the offered load; a
    ladder of streams is drawn against its stream count."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), dpi=100, sharex=False)
    for t in sweeps:
        pts = t.points
        by_rate = all(p.offered_mbps is not None for p in pts)
        xs = [p.offered_mbps if by_rate and p.offered_mbps is not None else p.streams for p in pts]
        label = traffic_label(t) + ("" if by_rate else ", x = streams")
        top.plot(xs, [p.achieved_mbps for p in pts], marker="o", label=label)
        bottom.plot(xs, [p.busiest_softirq_system_pct for p in pts], marker="o", label=label)
    top.set_ylabel("achieved, Mbit/s")
    top.set_title("throughput vs offered load (x: offered Mbit/s, or streams)")
    bottom.set_ylabel("DUT busiest core: softirq + system, %")
    bottom.set_xlabel("offered Mbit/s (or parallel streams)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        if sweeps:
            ax.legend(fontsize=8)
    return _svg(fig)


def saturation_svg(runs: list[SaturateOutput]) -> str:
    """Delivered vs offered packet rate of every window of each saturation search; the answer
    (the highest stable rate) is marked."""
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    top = 0.0
    for s in runs:
        steps = sorted([*s.steps, *(w for w in (s.verify_below, s.verify_above) if w)],
                       key=lambda w: w.offered_pps)
        xs = [w.offered_pps for w in steps]
        ys = [w.received_pps or 0.0 for w in steps]
        top = max(top, *xs, *ys)
        line = ax.plot(xs, ys, marker="o", label=f"{s.length} B {s.direction}: stable "
                       f"{s.stable_pps} pps, limit {s.limit}")[0]
        if s.stable_pps:
            ax.axvline(s.stable_pps, color=line.get_color(), linestyle=":", alpha=0.7)
    if top:
        ax.plot([0, top], [0, top], color="#999", linewidth=0.8, label="delivered = offered")
    ax.set_xlabel("offered, packets/s")
    ax.set_ylabel("delivered, packets/s")
    ax.set_title("saturation searches: delivered vs offered (dotted: the highest stable rate)")
    ax.grid(alpha=0.3)
    if runs:
        ax.legend(fontsize=8)
    return _svg(fig)
