"""The report shows the judge (issue 43, deliverable 3), on a real experiment session.

A kept `experiment` on the vlab runs its sweeps, compare, gate_check and symbolize as nested
calls (ctx.call, logged under the experiment's call). The report of that session lists the
nested comparison and every gate once each (the screening's parity gates and the survivor's
gate_check are one list per experiment), names the counters the profile declares, draws the one
workload point as a bar per stage (not a line over a degenerate x axis), and embeds every flame
graph as a static SVG image that needs no script: headless Chromium paints them in a screenshot
taken without a virtual time budget. A second session's call and `labwarden report --all` make
one report of the lab's ledger.

Everything is real: the vlab's processes, builds, flashes, perf and uprobes, the guard, the
transcript, the records, inferno, the renderer and Chromium. The profile judges at one workload
point (60 clients) with 2 s windows to stay short on 2 cores; 0901 (the gated write-back) cuts the
daemon's CPU by about a third there, far outside the rule's ±10% band.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import ToolCalled
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools.context import LabContext
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout

from .ci_skips import missing
from .conftest import needs_uprobes
from .fleet_fixtures import with_decision

pytestmark = pytest.mark.anyio
ONE_POINT = {"window_s": "2.0", "densities": "[60]", "sweep_reps": "2", "max_windows": "9",
             "min_effect_pct": "10.0"}
"""The [decision] of this lab: one workload point (60 clients), 2 s windows, a ±10% band."""


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VlabLayout, Path]]:
    needs_uprobes()  # the offered-load gate reads a uprobe counter; symbolize reads perf
    root = tmp_path_factory.mktemp("reportjudge")
    try:
        control.up(root)
        layout = VlabLayout.at(root)
        lab = with_decision(layout.lab_toml, ONE_POINT, "lab-one-point.toml")
        yield layout, lab
    finally:
        control.down(root)


async def _ok(ctx: LabContext, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    rec = await call_tool(ctx, tool, args)
    assert rec.ok and rec.result is not None, (tool, rec.error)
    return rec.result


def _flames(html: str) -> list[str]:
    """The flame graphs' SVG documents as the page embeds them (<img> data: URLs)."""
    found = re.findall(r'<img class="flame" src="data:image/svg\+xml;base64,([^"]+)"', html)
    return [base64.b64decode(b).decode() for b in found]


def _section(html: str, ident: str) -> str:
    start = html.index(f'<h2 id="{ident}">')
    end = html.find("<h2 ", start + 1)
    return html[start:end if end > 0 else len(html)]


def _chromium() -> list[str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        missing("chromium not installed (make setup installs Debian's chromium as root)")
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars"]


def _flame_bands(png: Path) -> list[tuple[int, int]]:
    """Vertical bands of the screenshot where a flame graph is painted: runs of rows whose
    width is almost all painted (not the page's white), at least 150 px tall, holding both
    inferno's background (its yellowish gradient, #eeeeee -> #eeeeb0) and rows of frames (rows
    the background hardly shows in). An image left blank is a white box: no band."""
    from PIL import Image  # matplotlib's own dependency

    img = Image.open(png).convert("RGB")
    w, h = img.size
    raw = img.tobytes()
    painted, background = [], []
    for y in range(h):
        n_painted = n_background = 0
        for x in range(0, w, 2):
            r, g, b = raw[3 * (y * w + x):3 * (y * w + x) + 3]
            n_painted += (r, g, b) != (255, 255, 255)
            n_background += 230 <= r <= 242 and abs(r - g) <= 4 and 165 <= b <= 225
        painted.append(n_painted / (w / 2))
        background.append(n_background / (w / 2))
    bands: list[tuple[int, int]] = []
    y = 0
    while y < h:
        if painted[y] < 0.8:
            y += 1
            continue
        top = y
        while y < h and painted[y] >= 0.8:
            y += 1
        rows = range(top, y)
        if (y - top >= 150 and sum(background[r] > 0.5 for r in rows) >= 10
                and sum(background[r] < 0.2 for r in rows) >= 30):
            bands.append((top, y))
    return bands


async def test_the_report_of_an_experiment_shows_its_judge(judged: tuple[VlabLayout, Path],
                                                           artifacts_dir: Path) -> None:
    layout, lab = judged
    prof = LabProfile.from_file(lab)
    declared = dict(prof.target.uprobes)
    assert len(declared) >= 2, "the vlab's profile declares its counters"
    async with open_lab(prof, client="test") as ctx:
        exp = await _ok(ctx, "experiment", {"patch": "0901"})
        assert exp["decision"] == "kept", exp
        out = await _ok(ctx, "report", {"name": "judge", "title": "the judge"})
        sid = ctx.session_id
    assert sid is not None
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        events = [e.event for e in store.events(sid) if isinstance(e.event, ToolCalled)]
    top = next(e for e in events if e.call.tool == "experiment")
    nested = [e.call.tool for e in events if e.parent_id == top.call.id]
    assert nested.count("compare") == 1 and nested.count("gate_check") == 1, nested

    assert out["comparisons"] == 1 and out["gates_passed"] == [True], out
    assert out["sessions"] == [sid]
    html = Path(out["path"]).read_text()

    # the nested comparison: one row, A's stage to B's, at the one point
    ab = _section(html, "ab")
    assert ab.count("<tr><td class=\"l\">") == 1, ab
    assert "base HEAD → 0901" in ab, ab

    # every gate of the experiment once: the screening's parity gates and the survivor's
    # gate_check in one list, each name one row
    gates = _section(html, "gates")
    names = re.findall(r'<tr class="gate-row"><td class="l">([a-z_]+)</td>', gates)
    assert names and len(names) == len(set(names)), names
    assert {"offered_load_parity", "declared_parity", "cpu_monotonic",
            "conditions_verified"} <= set(names), names
    assert gates.count("<h3>") == 1 and "experiment 0901" in gates, gates
    assert "full sweep: " in gates, "the parity gate checked twice shows both evidences"
    ledger = _section(html, "ledger")
    row = ledger[ledger.index('<tr class="exp-row"'):]
    row = row[:row.index("</tr>")]
    for cell in re.findall(r'<td class="l">([a-z_]+(?:, [a-z_]+)*)</td>', row):
        listed = cell.split(", ")  # the columns of failed / not applicable gates: each once
        assert len(listed) == len(set(listed)), (cell, row)
    assert 'id="judged-plot"><svg' in ledger, "what the rule decided, drawn"

    # the counters the profile declares, named from the profile
    counters = _section(html, "counters")
    for name, fn in declared.items():
        assert f"<code>{name}</code>" in counters and f"<code>{fn}</code>" in counters
    assert "declares no" not in counters

    # one workload point: a bar per stage, the x axis names the stages (no numeric ticks
    # around a single value such as -0.04 .. 0.04)
    plot = _section(html, "curve")
    assert "one workload point: 60 clients" in plot
    curve = plot[plot.index("<svg"):plot.index("</svg>") + 6]
    ET.fromstring(curve)  # a well-formed SVG
    texts = re.findall(r"<!-- (.*?) -->", curve)  # matplotlib's drawn texts, as comments
    assert "base HEAD" in texts and "0901" in texts, texts
    assert not any(t.startswith(("−0.0", "-0.0")) for t in texts), texts

    # every flame graph: a static SVG that draws without script
    flames = _flames(html)
    assert len(flames) == 3, "before, after and differential"
    for svg in flames:
        root = ET.fromstring(svg.encode())
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert "<script" not in svg and not re.search(r"\son[a-z]+=", svg), "no script needed"
        assert svg.count("<rect") > 10, "its frames are static rectangles"
    assert "<iframe" not in html and "<script" not in html

    # headless Chromium, no virtual time budget: every flame graph painted
    shutil.copy(out["path"], artifacts_dir / "report-judge.html")
    shot = artifacts_dir / "report-judge.png"
    shot.unlink(missing_ok=True)
    flags = [*_chromium(), f"--user-data-dir={layout.root / 'chromium-profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", Path(out["path"]).as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert dom.count('<img class="flame"') == 3
    height = 4200 + html.count("<tr") * 30  # the whole page in one window
    subprocess.run([*flags, f"--window-size=1280,{height}", f"--screenshot={shot}",
                    Path(out["path"]).as_uri()], capture_output=True, timeout=180)
    assert shot.is_file() and shot.stat().st_size > 20_000
    bands = _flame_bands(shot)
    assert len(bands) >= 3, f"flame graphs painted: {bands}"


def test_a_report_over_several_sessions_of_one_lab(judged: tuple[VlabLayout, Path]) -> None:
    """A second session (a gate check of A's sweep, as a client asks for it) and `report --all`:
    one report with both sessions, the first session's experiment and its gates and the second
    session's gate check; `report ID1 ID2` names the same two."""
    _layout, lab = judged
    prof = LabProfile.from_file(lab)
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        first = next(s.id for s in store.sessions() if s.client == "test")
        exp = next(e.event for e in store.events(first) if isinstance(e.event, ToolCalled)
                   and e.event.call.tool == "experiment" and e.event.parent_id is None)
    assert exp.call.result is not None
    sweep_a = exp.call.result["sweep_a"]
    runner = CliRunner()
    res = runner.invoke(app, ["call", "gate_check", f'{{"sweep_id": "{sweep_a}"}}', "--lab", str(lab),
                              "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "--lab", str(lab)])
    assert res.exit_code == 2 and "--all" in res.output, "a session or --all is named"
    res = runner.invoke(app, ["report", "--all", "--lab", str(lab), "--name", "ledger"])
    assert res.exit_code == 0, res.output
    html = (prof.data_dir() / "reports" / "ledger.html").read_text()
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        second = next(s.id for s in store.sessions() if s.client != "test"
                      and any(isinstance(e.event, ToolCalled) and e.event.call.tool == "gate_check"
                              for e in store.events(s.id)))
    listed = re.findall(r"<li><code>([0-9a-z-]+)</code>: transcript", html)
    assert first in listed and second in listed and listed.index(first) < listed.index(second)
    assert html.count('class="exp-row"') == 1, "the first session's experiment"
    gates = _section(html, "gates")
    assert "experiment 0901" in gates and "base HEAD:" in gates, "both sessions' gates"
    assert _section(html, "ab").count("<tr><td class=\"l\">") == 1
    res = runner.invoke(app, ["report", first[:-3], second, "--lab", str(lab), "--name", "two",
                              "--json"])
    assert res.exit_code == 0, res.output
    two = (prof.data_dir() / "reports" / "two.html").read_text()
    assert re.findall(r"<li><code>([0-9a-z-]+)</code>: transcript", two) == [first, second]
