"""Playbooks: reference resolution, file errors, and a real run on the vlab ending in a report
that headless Chromium opens (DOM checked, screenshot kept as a test artifact)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.playbook import model, refs
from labwarden.vlab.layout import VlabLayout

from .ci_skips import missing

DATA = Path(__file__).parent / "data"


def test_references_keep_types_and_interpolate() -> None:
    scope = {"vars": {"d": [6, 18]}, "s": {"points": [{"id": "a"}, {"id": "b"}]}}
    assert refs.resolve("${vars.d}", scope) == [6, 18]
    assert refs.resolve({"x": ["${s.points[-1].id}", "p-${s.points[0].id}"]}, scope) == {"x": ["b", "p-a"]}
    with pytest.raises(refs.RefError, match=r"nothing at 's\.points\[5\]'"):
        refs.resolve("${s.points[5].id}", scope)
    assert refs.resolve("no $refs {here}", scope) == "no $refs {here}"


def test_playbook_errors_name_the_step(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[step]]\nid = "one"\ntool = "lab_status"\nargz = {}\n')
    with pytest.raises(model.PlaybookError, match=r"step one\.argz: Extra inputs"):
        model.load(bad)
    bad.write_text('name = "x"\n[[step]]\nid = "a"\ntool = "t"\n[[step]]\nid = "a"\ntool = "t"\n')
    with pytest.raises(model.PlaybookError, match="used twice"):
        model.load(bad)
    book = model.load(Path("playbooks/vlab-hotspot.toml"), {"window_s": 9})
    assert book.vars["window_s"] == 9 and len(book.steps) > 30


def test_the_qlab_story_and_its_demo_door() -> None:
    """The qlab's playbook names only registered tools (its run is `demo --lab-kind qlab`:
    minutes of TCG reboots, not in the suite); an unknown lab kind is refused by name."""
    from labwarden.tools.registry import TOOLS

    book = model.load(Path("playbooks/qlab-hotspot.toml"))
    assert book.vars["densities"] == [18, 60, 114]
    assert {s.tool for s in book.steps} <= set(TOOLS)
    assert [s.args["patches"] for s in book.steps if s.tool == "build"] == [
        ["0901"], ["0901", "0902"], ["0901", "0902", "0905"]]
    # the sweeps it compares carry no perf record (guest work of its own on the qlab's one
    # vCPU); each flame graph reads a window of its own
    assert all(s.args["perf"] is False for s in book.steps if s.tool == "sweep")
    measured = {s.id for s in book.steps if s.tool == "measure"}
    assert all(s.args["profile_id"].split(".")[0].strip("${") in measured
               for s in book.steps if s.tool == "symbolize")
    res = CliRunner().invoke(app, ["demo", "--lab-kind", "blab"])
    assert res.exit_code == 2 and "blab" in res.output and "qlab" in res.output


def test_the_traffic_story_names_registered_tools() -> None:
    """playbooks/qlab-traffic.toml (seeds 001/002 on the traffic qlab; its run needs `qlab up
    --traffic`, minutes under TCG, not in the suite): it parses, names only registered tools, and
    tells its story -- saturate at 100 B and 1500 B, a system-wide profile, the rules as a set
    judged against the chain's saturation."""
    from labwarden.tools.registry import TOOLS

    book = model.load(Path("playbooks/qlab-traffic.toml"), {"rules": 2000})
    assert book.vars["rules"] == 2000
    assert {s.tool for s in book.steps} <= set(TOOLS)
    assert [s.args["length"] for s in book.steps if s.tool == "saturate"] == [100, 1472, 100, 1200, 1200]
    assert [s.args["mode"] for s in book.steps if s.tool == "router_rules"] == [
        "chain", "set", "set", "chain"]
    assert [s.args.get("wireguard") for s in book.steps if s.tool == "router_rules"] == [
        None, None, True, False]
    assert any(s.tool == "measure" and s.args.get("system_wide") for s in book.steps)
    judged = next(s for s in book.steps if s.id == "sat100_set")
    assert judged.args["baseline"] == "${sat100.saturate_id}"
    assert judged.expect == {"vs_baseline.improved": True}



def test_run_writes_a_report_chromium_can_read(lab: VlabLayout, artifacts_dir: Path) -> None:
    res = CliRunner().invoke(app, ["run", str(DATA / "mini.toml"), "--lab", str(lab.lab_toml)])
    assert res.exit_code == 0, res.output
    assert "improved" in res.stdout and "report:" in res.stdout
    assert "baseline -> 0901" in res.stdout, "the A/B table names the stages by their labels"
    report = lab.data_dir / "reports" / "mini.html"
    assert f"report: {report}" in res.stdout.replace("\n", "")
    html = report.read_text()
    assert "baseline → 0901" in html and "<h3>baseline: " in html, "A/B rows and gates by stage"
    assert html.count('<img class="flame"') == 3, "before, after and differential flame graphs"
    payloads = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    frames = [base64.b64decode(b).decode() for b in payloads]
    assert len(frames) == 3 and all(f.lstrip().startswith("<?xml") and "<svg" in f for f in frames)
    assert not any("<script" in f or "onload=" in f for f in frames), "drawn without script"
    assert "dm_finalize_transaction" in frames[0], "the baseline flame graph names the tower"
    for table in ("curve-table", "ab-table", "counter-table", "window-table", "cost-table"):
        assert f'id="{table}"' in html
    remote = re.findall(r'(?:src|href)\s*=\s*["\']https?://[^"\']+|<link[^>]+>|url\(https?://', html)
    assert remote == [], "self-contained: nothing fetched from the network"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        missing("chromium not installed (make setup installs Debian's chromium as root)")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={lab.root / 'chromium-profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert re.search(r'<div id="plot">\s*<svg', dom), "the CPU plot rendered inline"
    assert dom.count('<img class="flame"') == 3 and 'id="ab-table"' in dom
    shot = artifacts_dir / "report.png"
    subprocess.run([*flags, "--window-size=1280,2400", f"--screenshot={shot}", report.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
