"""The report's plots as inline SVG (matplotlib, no display): CPU vs the workload per stage, and
for traffic studies throughput and the DUT's CPU vs offered load, and delivered vs offered
packet rate per saturation search."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: a report is rendered where no display exists
import matplotlib.pyplot as plt

from labwarden.report.data import Stage
from labwarden.results.saturate import SaturateOutput
from labwarden.results.traffic_sweep import TrafficSweepOutput


def curves_svg(stages: list[Stage], axis: str | None = "clients") -> str:
    """CPU per stage over the workload points (`axis`: what they count; None: one point, the
    DUT's own workload, drawn at 0)."""
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
