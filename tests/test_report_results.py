"""The report and the playbook's summary tables, from results stored in a real transcript as
their tools' output models: the report reads them back as models (results.output_of) and draws
every section from their fields. No lab: the results are built here, the records written to a
temporary data dir, the store and the renderer are the real ones."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from labwarden.core.call import ToolCallRecord
from labwarden.core.events import ToolCalled
from labwarden.core.measurements import SweepPoint, SweepRecord
from labwarden.core.records import RecordStore
from labwarden.report import data as report_data
from labwarden.report import render
from labwarden.results.attribute import AttributeOutput
from labwarden.results.compare import CompareOutput, PointDelta
from labwarden.results.gate_check import CheckedGate, GateOutput
from labwarden.results.saturate import SatStep, SaturateOutput
from labwarden.results.sweep import SweepOutput
from labwarden.results.traffic_sweep import IdleCpu, TrafficPoint, TrafficSweepOutput
from labwarden.transcripts.store import TranscriptStore


def _call(tool: str, out: BaseModel) -> ToolCalled:
    return ToolCalled.of(ToolCallRecord(tool=tool, args={}, ok=True,
                                        result=out.model_dump(mode="json")))


def _sweep(sid: str, label: str, cpu: float) -> SweepRecord:
    return SweepRecord(id=sid, label=label, started_at=datetime.now(UTC), window_s=3, reps=1,
                       build_id="b1", cleanup_count=0, points=[SweepPoint(
                           stations=18, profile_id="prof-000000000001", cpu_mean=cpu,
                           cpu_stdev=0.5, cpu_per_rep=[cpu], idle_cpu_mean=None, counters={},
                           rss_kb=1000, per_radio=[18], clients_held=True)])


def _step(pps: int, received: float, stable: bool) -> SatStep:
    return SatStep(offered_pps=pps, offered_mbps=pps * 0.0008, received_pps=received,
                   loss_pct=0.0 if stable else 20.0, shortfall_pct=0.0 if stable else 20.0,
                   stable=stable, on_target=True, cpu_busy_pct=50.0, busiest_cpu="cpu0",
                   busiest_softirq_system_pct=95.0, ksoftirqd_pct=30.0, softnet_squeezed=3,
                   queue_drops=0, dut_forwarded_pct=99.0, dut_rx_pps=received)


def test_every_section_is_drawn_from_the_results_models(tmp_path: Path) -> None:
    records = RecordStore(tmp_path)
    base, fix = _sweep("swp-00000000000a", "baseline", 30.0), _sweep("swp-00000000000b", "0901", 20.0)
    for rec in (base, fix):
        records.save("swp", rec.id, rec)
    compare = CompareOutput(
        baseline=base.id, candidate=fix.id, baseline_build="b1", candidate_build="b2",
        verdict="improved", deltas=[PointDelta(
            stations=18, baseline_mean=30.0, candidate_mean=20.0, delta_pp=-10.0, delta_pct=-33.3,
            p_value=0.001, ci95_pp=(-11.0, -9.0), ci95_pct=(-36.0, -30.0), verdict="improved")])
    gates = GateOutput(sweep_id=fix.id, passed=False, failed=["rss_bounded"],
                       not_applicable=["unknown_frames"], gates=[
                           CheckedGate.judged("cpu_monotonic", True, "rises"),
                           CheckedGate.judged("rss_bounded", False, "grew 9 kB per client"),
                           CheckedGate.not_applicable("unknown_frames", "no perf")])
    attribute = AttributeOutput(suspect="stamon", suspect_pid=42, before_pct=30.0, during_pct=3.0,
                                after_pct=29.0, drop_pct=90.0, resumed=True, resumed_after_s=0.1,
                                resumed_by="release", pause_held=True, window_s=5)
    traffic = TrafficSweepOutput(
        sweep_id="tsw-00000000000c", label="chain-200", proto="udp", direction="up", length=1200,
        idle=IdleCpu(busy_pct=2.0, softirq_pct=0.1, busiest_softirq_system_pct=1.0, summary="idle"),
        points=[TrafficPoint(offered_mbps=m, streams=1, achieved_mbps=m * 0.99, loss_pct=0.5,
                             received_pps=m * 100, retransmits=None, cpu_busy_pct=m / 2,
                             softirq_pct=m / 4, busiest_cpu="cpu1", busiest_softirq_system_pct=m,
                             ksoftirqd_pct=0.0, queue_drops=0, on_target=True, check=None)
                for m in (25.0, 50.0)])
    saturate = SaturateOutput(
        saturate_id="sat-00000000000d", length=100, direction="up", loss_max_pct=1.0,
        stable_pps=40_000, stable_mbps=32.0, limit="cpu", evidence="busiest core at 95%",
        steps=[_step(20_000, 20_000, True), _step(80_000, 50_000, False),
               _step(40_000, 40_000, True)],
        verify_above=_step(48_000, 41_000, False), verify_below=_step(32_000, 32_000, True),
        confirmed=True)
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("test")
        for ev in (_call("sweep", SweepOutput(sweep_id=base.id, label=base.label, build_id="b1",
                                              points=base.points, cleanup_count=0, idle_note=None)),
                   _call("sweep", SweepOutput(sweep_id=fix.id, label=fix.label, build_id="b2",
                                              points=fix.points, cleanup_count=0, idle_note=None)),
                   _call("compare", compare), _call("gate_check", gates),
                   _call("attribute", attribute), _call("traffic_sweep", traffic),
                   _call("saturate", saturate)):
            store.append(sid, ev)
        d = report_data.collect(store, sid, tmp_path, "typed")
    assert d.compares == [compare] and d.gates == [gates] and d.attributions == [attribute]
    assert d.traffic == [traffic] and d.saturations == [saturate] and d.unreadable == []
    assert [s.label for s in d.stages] == ["baseline", "0901"]
    assert d.label(fix.id) == "0901" and d.label("swp-0000000000ff") == "swp-0000000000ff"
    html = render.render(d)
    assert "baseline → 0901" in html and "-33.3" in html and "-36.0 … -30.0" in html
    assert "<h3>0901: " in html and "FAILED: rss_bounded" in html
    assert "not applicable here: unknown_frames" in html
    assert re.search(r"<td class=\"l\">stamon</td><td>5.0</td><td>30.00</td>\s*<td>3.00</td>", html)
    assert html.count('class="traffic-row"') == 2 and html.count('class="traffic-idle"') == 1
    assert "chain-200 (udp up 1200 B)" in html and 'id="traffic-plot"><svg' in html
    assert html.count('class="saturation-row"') == 1 and 'id="saturation-plot"><svg' in html
    assert "40000" in html and ">confirmed<" in html and "busiest core at 95%" in html


def test_a_kept_experiment_brings_its_curves_and_its_differential_flame_graph(tmp_path: Path) -> None:
    """The experiment call's output names its record; the record's FlameRef gives the before,
    after and differential SVGs (inside symbolized/: embedded; a path outside it: dropped)."""
    from labwarden.core.experiments import Experiment, FlameRef, FunctionDelta
    from labwarden.results.experiment import ExperimentOutput

    records = RecordStore(tmp_path)
    a, b = _sweep("swp-00000000001a", "", 30.0), _sweep("swp-00000000001b", "", 20.0)
    for rec in (a, b):
        records.save("swp", rec.id, rec.model_copy(update={"label": None}))
    sym = tmp_path / "symbolized" / "k1"
    sym.mkdir(parents=True)
    svgs = {}
    for name in ("flame", "diff", "base"):
        svgs[name] = sym / f"{name}.svg"
        svgs[name].write_text(f'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg">{name}</svg>')
    outside = tmp_path / "elsewhere.svg"
    outside.write_text("<svg>outside</svg>")
    exp = Experiment(id="exp-00000000001c", patch="bulk-pull-1", patch_name="bulk-pull", ref="HEAD",
                     started_at=datetime.now(UTC), sweep_a=a.id, sweep_b=b.id, decision="kept",
                     reason="improved", flame=FlameRef(
                         profile_id="prof-000000000001", baseline_profile_id="prof-000000000002",
                         key="k1", svg=str(svgs["flame"]), diff_svg=str(svgs["diff"]),
                         baseline_svg=str(svgs["base"]), stations=18, samples=900, unknown_pct=0.4),
                     flame_deltas=[FunctionDelta(symbol="wld_ad_syncInfo", base_pct=40.0, new_pct=5.0,
                                                 delta_pp=-35.0)])
    elsewhere = exp.model_copy(update={"id": "exp-00000000001d", "flame": FlameRef(
        profile_id="prof-000000000001", baseline_profile_id="prof-000000000002",
        svg=str(outside), diff_svg=str(outside), baseline_svg=str(outside))})
    for x in (exp, elsewhere):
        records.save("exp", x.id, x)
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("test")
        for x in (elsewhere, exp):
            store.append(sid, _call("experiment", ExperimentOutput(
                experiment_id=x.id, patch=x.patch, decision="kept", reason="improved",
                verdict="improved", stations=18, mean_a=30.0, mean_b=20.0, delta_pct=-33.3,
                ci_pct=(-40.0, -25.0), equivalence_pct=None, windows=(3, 3), offered_load=None,
                gates_failed=[], build_a="b1", build_b="b2", sweep_a=a.id, sweep_b=b.id,
                cost_usd=0.0, lab_seconds=60.0)))
        d = report_data.collect(store, sid, tmp_path, "kept")
    assert [s.label for s in d.stages] == ["bulk-pull base", "bulk-pull"]
    assert [x.id for x in d.experiments] == [elsewhere.id, exp.id]
    dropped, kept = d.symbolized
    assert dropped.svg is None and dropped.diff_svg is None  # outside symbolized/: never read
    assert kept.diff_svg == str(svgs["diff"].resolve()) and kept.samples == 900
    assert [t.symbol for t in kept.top_deltas] == ["wld_ad_syncInfo"]
    html = render.render(d)
    assert html.count('<img class="flame"') == 3, "before, after and differential"
    assert "outside" not in html
    assert "measurement prof-000000000001 at 18 clients, 900 samples, 0.4% unknown frames" in html
    assert "<code>wld_ad_syncInfo</code>" in html


def _text_of(svg: str) -> list[str]:
    """The texts matplotlib drew (its SVG keeps each as a comment beside the glyph paths)."""
    return re.findall(r"<!-- (.*?) -->", svg)


def test_one_workload_point_is_a_bar_per_stage_not_a_line_over_a_degenerate_axis() -> None:
    from labwarden.report.data import Stage
    from labwarden.report.plot import curves_svg

    one = [Stage(label=label, sweep=_sweep(f"swp-00000000003{i}", label, cpu).model_copy(
        update={"points": [_sweep("x", "", cpu).points[0].model_copy(update={"stations": 0})]}),
        measurements=[]) for i, (label, cpu) in enumerate((("base HEAD", 30.0), ("0901", 20.0)))]
    texts = _text_of(curves_svg(one, None))
    assert "base HEAD" in texts and "0901" in texts, "the x axis names the stages"
    assert not any(t.startswith(("−0.0", "-0.0", "0.02", "0.04")) for t in texts), texts
    assert "30.00 ± 0.50" in texts and "20.00 ± 0.50" in texts
    assert "stage (one workload point: the DUT's own workload)" in texts
    at18 = _text_of(curves_svg(one[:1] and [one[0].model_copy(update={"sweep": _sweep("a", "A", 3.0)})],
                               "clients"))
    assert "stage (one workload point: 18 clients)" in at18


def _nested(tool: str, out: BaseModel, parent: str) -> ToolCalled:
    return ToolCalled.of(ToolCallRecord(tool=tool, args={}, ok=True,
                                        result=out.model_dump(mode="json")), parent_id=parent)


def test_an_experiments_nested_compare_and_gates_are_shown_each_once(tmp_path: Path) -> None:
    """The experiment's compare and gate_check are nested calls (written before the
    experiment's own event): the report counts the comparison, and lists the experiment's
    gates once each -- its screening's parity gates and the survivor's gate_check (which checks
    the parity gates again on the full sweeps) merged by name, both evidences kept."""
    from labwarden.core.experiments import Experiment, Gate
    from labwarden.tools.experiment import summarize

    records = RecordStore(tmp_path)
    a, b = _sweep("swp-00000000002a", "base HEAD", 30.0), _sweep("swp-00000000002b", "0901", 20.0)
    for rec in (a, b):
        records.save("swp", rec.id, rec)
    screen = [Gate.judged("offered_load_parity", True, "6.0 -> 6.0 calls/s"),
              Gate.not_applicable("declared_parity", "no check declared")]
    checked = GateOutput(sweep_id=b.id, passed=True, failed=[],
                         not_applicable=["declared_parity", "cpu_monotonic"], gates=[
                             CheckedGate.judged("offered_load_parity", True, "6.1 -> 6.0 calls/s"),
                             CheckedGate.not_applicable("declared_parity", "no check declared"),
                             CheckedGate.not_applicable("cpu_monotonic", "one point"),
                             CheckedGate.judged("conditions_verified", True, "all pinned")])
    exp = Experiment(id="exp-00000000002c", patch="0901", ref="HEAD", started_at=datetime.now(UTC),
                     sweep_a=a.id, sweep_b=b.id, decision="kept", reason="improved",
                     gates=[*screen, *(Gate(name=g.name, passed=g.passed, status=g.status,
                                            evidence=("full sweep: " if g.name in
                                                      {"offered_load_parity", "declared_parity"}
                                                      else "") + g.evidence)
                                       for g in checked.gates)])
    records.save("exp", exp.id, exp)
    compare = CompareOutput(baseline=a.id, candidate=b.id, baseline_build="b1", candidate_build="b2",
                            verdict="improved", deltas=[PointDelta(
                                stations=18, baseline_mean=30.0, candidate_mean=20.0, delta_pp=-10.0,
                                delta_pct=-33.3, p_value=0.001, ci95_pp=(-11.0, -9.0),
                                ci95_pct=(-36.0, -30.0), verdict="improved")])
    top = ToolCallRecord(tool="experiment", args={"patch": "0901"}, ok=True,
                         result=summarize(exp).model_dump(mode="json"))
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("test")
        for ev in (_nested("sweep", SweepOutput(sweep_id=a.id, label=a.label, build_id="b1",
                                                points=a.points, cleanup_count=0, idle_note=None), top.id),
                   _nested("compare", compare, top.id), _nested("gate_check", checked, top.id),
                   ToolCalled.of(top)):
            store.append(sid, ev)
        d = report_data.collect(store, sid, tmp_path, "nested",
                                declared_counters={"rpc_calls": "getStationStats"})
    assert [x.id for x in d.experiments] == [exp.id]
    assert d.compares == [compare] and d.gates == [checked] and d.tool_calls == 1
    assert d.gates_of_experiment == {b.id: exp.id}
    (section,) = d.gate_sections
    assert [r.name for r in section.rows] == ["offered_load_parity", "declared_parity",
                                              "cpu_monotonic", "conditions_verified"]
    assert section.rows[0].evidence == ["6.0 -> 6.0 calls/s", "full sweep: 6.1 -> 6.0 calls/s"]
    assert section.not_applicable == ["declared_parity", "cpu_monotonic"] and not section.failed
    html = render.render(d)
    assert "base HEAD → 0901" in html and html.count('class="gate-row"') == 4
    assert "declared_parity, cpu_monotonic<" in html and "declared_parity, declared_parity" not in html
    assert "<code>rpc_calls</code>" in html and "<code>getStationStats</code>" in html
    assert "declares no" not in html and "no sweep here counted it" not in html.split(
        'id="declared-counters"')[0]


def test_declared_counters_are_named_without_a_sweep(tmp_path: Path) -> None:
    """A report with no sweep (a bisection's windows live in its own record) still names the
    profile's counters; only a profile that declares none says so."""
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("test")
        d = report_data.collect(store, sid, tmp_path, "bisect only",
                                declared_counters={"rpc_calls": "getStationStats",
                                                   "dm_write_txns": "dm_finalize_transaction"})
        none = report_data.collect(store, sid, tmp_path, "no counters", declared_counters={})
        unknown = report_data.collect(store, sid, tmp_path, "not given the profile")
    html = render.render(d)
    assert d.counters == ["rpc_calls", "dm_write_txns"] and d.measured_counters == []
    assert html.count('class="declared-counter"') == 2 and "dm_finalize_transaction" in html
    assert "declares no" not in html and "No sweep in this report counted them" in html
    assert "The profile declares no [target] uprobes" in render.render(none)
    assert "No counters measured in this report." in render.render(unknown)


def test_a_flame_graph_is_embedded_as_a_static_svg(tmp_path: Path) -> None:
    """inferno's own SVG without its script, handlers and controls; frames and titles kept."""
    import subprocess
    import xml.etree.ElementTree as ET

    from labwarden.lab.host.binaries import which
    from labwarden.report.static_svg import NotAnSvg, static_svg

    inferno = which("inferno-flamegraph")
    if inferno is None:
        from .ci_skips import missing
        missing("inferno-flamegraph not installed (make setup: cargo install inferno --root .tools)")
    folded = b"main;poll;getStationStats;dm_finalize_transaction 70\nmain;poll;trace 20\nmain;idle 10\n"
    svg = subprocess.run([inferno], input=folded, capture_output=True, check=True).stdout
    assert b"<script" in svg and b"onload=" in svg, "inferno draws with script when it can"
    out = static_svg(svg)
    root = ET.fromstring(out.encode())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "<script" not in out and not re.search(r"\son[a-z]+=", out)
    assert 'id="search"' not in out and 'id="unzoom"' not in out
    assert out.count("<rect") == svg.count(b"<rect") and "dm_finalize_transaction" in out
    assert "<title>dm_finalize_transaction (70 samples, 70.00%)</title>" in out
    hostile = (b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
               b'<script>alert(1)</script><rect onclick="x()" width="1"/><image xlink:href="http://e/x"/>'
               b'<foreignObject><div>x</div></foreignObject><use xlink:href="#a"/></svg>')
    clean = static_svg(hostile)
    assert "alert" not in clean and "onclick" not in clean and "http://e" not in clean
    assert "foreignObject" not in clean and 'href="#a"' in clean
    for bad in (b"<html/>", b"not xml"):
        try:
            static_svg(bad)
        except NotAnSvg:
            continue
        raise AssertionError(bad)
