"""CPU-vs-stations curves of every stage on one plot, as inline SVG (matplotlib, no display)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # headless: a report is rendered where no display exists
import matplotlib.pyplot as plt

from labwarden.report.data import Stage


def curves_svg(stages: list[Stage]) -> str:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for st in stages:
        xs = [p.stations for p in st.sweep.points]
        ys = [p.cpu_mean for p in st.sweep.points]
        es = [p.cpu_stdev for p in st.sweep.points]
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=st.label)
    ax.set_xlabel("associated clients")
    ax.set_ylabel("target CPU, % of one core")
    ax.set_title("CPU vs clients, per stage (mean ± stdev over reps)")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    if stages:
        ax.legend(fontsize=8)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prolog: it is inlined in HTML
