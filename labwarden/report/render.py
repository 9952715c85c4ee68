"""Render ReportData into one self-contained HTML file (no network, no external assets)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from labwarden import __version__
from labwarden.core.measurements import SweepPoint
from labwarden.report.data import Flame, ReportData, Stage, merged_gates
from labwarden.report.plot import curves_svg, judged_svg, saturation_svg, traffic_label, traffic_svg
from labwarden.report.static_svg import NotAnSvg, static_svg


def _point(stage: Stage, n: int) -> SweepPoint | None:
    return next((p for p in stage.sweep.points if p.stations == n), None)


def _flames(d: ReportData) -> list[dict[str, str]]:
    """Before (first plain symbolize), after and the differential (last with a baseline)."""
    out = []
    plain = [s for s in d.symbolized if not s.baseline_profile_id]
    diffs = [s for s in d.symbolized if s.diff_svg]
    picks: list[tuple[str, Flame, str]] = []
    if plain:
        picks.append(("Before", plain[0], "svg"))
    elif diffs and diffs[-1].baseline_svg:
        picks.append(("Before", diffs[-1], "baseline_svg"))
    if diffs:
        picks.append(("After", diffs[-1], "svg"))
        picks.append(("Differential (after vs before: red grew, blue shrank)", diffs[-1], "diff_svg"))
    elif len(plain) > 1:
        picks.append(("After", plain[-1], "svg"))
    for title, s, key in picks:
        svg: str | None = getattr(s, key)
        path = Path(svg) if svg else None  # report/data.py drops paths out of the data dir
        if path is not None and path.is_file():
            pid = s.baseline_profile_id if key == "baseline_svg" else s.profile_id
            caption = (f"measurement {pid}" if key == "baseline_svg" else
                       f"measurement {pid} at {d.point(s.stations or 0)}, {s.samples} samples, "
                       f"{s.unknown_pct}% unknown frames")
            # drawn without script: inferno's frames are static <rect>/<text>; its script (fit
            # to the frame, zoom, search) is taken out and the graph is an <img>, which a
            # browser paints when the page loads (an iframe running the script drew blank
            # boxes in a headless screenshot taken without a time budget)
            try:
                svg_text = static_svg(path.read_bytes())
            except NotAnSvg as exc:
                out.append({"title": title, "src": "", "caption": f"{caption}: not embedded ({exc})"})
                continue
            data = base64.b64encode(svg_text.encode()).decode()
            out.append({"title": title, "src": f"data:image/svg+xml;base64,{data}", "caption": caption})
    return out


def _notes(d: ReportData) -> list[str]:
    """What was not measured, once each (e.g. uprobe counters on a DUT without tracefs)."""
    seen: list[str] = []
    for st in d.stages:
        for prof in st.measurements:
            for note in prof.notes:
                if note not in seen:
                    seen.append(note)
    return seen


def render(d: ReportData) -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("labwarden.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]))
    densities = sorted({p.stations for s in d.stages for p in s.sweep.points})
    return env.get_template("report.html.j2").render(
        d=d, plot=curves_svg(d.stages, d.axis), densities=densities, point=_point, flames=_flames(d),
        notes=_notes(d), traffic_plot=traffic_svg(d.traffic) if d.traffic else "",
        saturation_plot=saturation_svg(d.saturations) if d.saturations else "",
        traffic_label=traffic_label, merged=merged_gates,
        judged_plot=judged_svg(d.experiments) if any(x.screening and x.screening.looks
                                                     for x in d.experiments) else "",
        version=__version__, generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def write(d: ReportData, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(d))
    tmp.replace(path)
    return path
