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
    assert html.count("<iframe") == 3, "before, after and differential"
    assert "outside" not in html
    assert "measurement prof-000000000001 at 18 clients, 900 samples, 0.4% unknown frames" in html
    assert "<code>wld_ad_syncInfo</code>" in html
