"""Render ReportData into one self-contained HTML file (no network, no external assets)."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from labwarden import __version__
from labwarden.report.data import ReportData, Stage
from labwarden.report.plot import curves_svg


def _point(stage: Stage, n: int):  # type: ignore[no-untyped-def]
    return next((p for p in stage.sweep.points if p.stations == n), None)


def _flames(d: ReportData) -> list[dict[str, str]]:
    """Before (first plain symbolize), after and the differential (last with a baseline)."""
    out = []
    plain = [s for s in d.symbolized if not s.get("baseline_profile_id")]
    diffs = [s for s in d.symbolized if s.get("diff_svg")]
    picks = []
    if plain:
        picks.append(("Before", plain[0], "svg"))
    if diffs:
        picks.append(("After", diffs[-1], "svg"))
        picks.append(("Differential (after vs before: red grew, blue shrank)", diffs[-1], "diff_svg"))
    elif len(plain) > 1:
        picks.append(("After", plain[-1], "svg"))
    for title, s, key in picks:
        path = Path(s[key])
        if path.is_file():
            out.append({"title": title, "svg": html.escape(path.read_text(errors="replace")),
                        "caption": f"profile {s['profile_id']} at {s.get('stations', '?')} clients, "
                                   f"{s['samples']} samples, {s['unknown_pct']}% unknown frames"})
    return out


def render(d: ReportData) -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("labwarden.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]))
    densities = sorted({p.stations for s in d.stages for p in s.sweep.points})
    return env.get_template("report.html.j2").render(
        d=d, plot=curves_svg(d.stages), densities=densities, point=_point, flames=_flames(d),
        version=__version__, generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def write(d: ReportData, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(d))
    tmp.replace(path)
    return path
