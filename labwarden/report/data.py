"""Collect what a report shows from a transcript session and the records it names."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Bisection, Experiment, FunctionDelta, Gate
from labwarden.core.measurements import MeasurementRecord, SweepRecord
from labwarden.core.paths import PathRefused, contained
from labwarden.core.records import RecordNotFound, RecordStore, RecordUnreadable
from labwarden.lab.host.folded import PathStep
from labwarden.results import UnreadableResult, output_of
from labwarden.results.attribute import AttributeOutput
from labwarden.results.bisect import BisectOutput
from labwarden.results.compare import CompareOutput
from labwarden.results.experiment import ExperimentOutput
from labwarden.results.gate_check import GateOutput
from labwarden.results.saturate import SaturateOutput
from labwarden.results.sweep import SweepOutput
from labwarden.results.symbolize import FunctionShare, SymbolizeOutput
from labwarden.results.traffic_sweep import TrafficSweepOutput
from labwarden.transcripts.store import TranscriptStore

M = TypeVar("M", bound=BaseModel)


class Stage(BaseModel):
    label: str
    sweep: SweepRecord
    measurements: list[MeasurementRecord]


class WindowRow(BaseModel):
    stage: str
    stations: int
    rep: int
    cpu_pct: float
    build_id: str | None
    verified: bool
    governors: str
    boost: str
    clk_tck: int
    host: str
    cpu_clock: str = "ticks"
    resolution_pct: float | None = None

    @property
    def cpu_step(self) -> str:
        """The clock of cpu_pct and what one step of it is worth, beside CLK_TCK."""
        if self.resolution_pct is None:  # a record older than the finer clock
            return "ticks"
        share = (f" = {100 * self.resolution_pct / self.cpu_pct:.2g}% of it"
                 if self.cpu_pct > 0 else "")
        if self.cpu_clock == "schedstat_ns":
            return f"schedstat ns, step {self.resolution_pct:.2g}{share}"
        return f"ticks, one tick {self.resolution_pct:.2g}{share}"


class Rejected(BaseModel):
    """A patch_submit that did not become a candidate (protected path, did not apply or compile)."""

    name: str
    code: str
    reason: str
    lines: list[str]


class Flame(BaseModel):
    """A flame graph the report shows: a symbolize result, or a kept candidate's differential
    (its experiment record keeps the SVGs and the top deltas, not the hot path)."""

    profile_id: str | None
    stations: int | None = None
    samples: int | None = None
    unknown_pct: float | None = None
    baseline_profile_id: str | None = None
    svg: str | None = None
    diff_svg: str | None = None
    baseline_svg: str | None = None
    dominant_path: list[PathStep] = []
    functions: list[FunctionShare] = []
    top_deltas: list[FunctionDelta] = []

    @classmethod
    def of_symbolize(cls, out: SymbolizeOutput) -> Flame:
        return cls(profile_id=out.profile_id, stations=out.stations, samples=out.samples,
                   unknown_pct=out.unknown_pct, baseline_profile_id=out.baseline_profile_id,
                   svg=out.svg, diff_svg=out.diff_svg, baseline_svg=out.baseline_svg,
                   dominant_path=out.dominant_path, functions=out.functions,
                   top_deltas=[FunctionDelta.model_validate(d.model_dump()) for d in out.top_deltas])

    def contained(self, root: Path) -> Flame:
        """This flame graph with only the SVG paths the report may embed: files inside the data
        dir's symbolized/ (a path anywhere else is dropped, never read)."""
        paths: dict[str, str | None] = {}
        for key in ("svg", "baseline_svg", "diff_svg"):
            value = getattr(self, key)
            if value is not None:
                try:
                    paths[key] = str(contained(value, [root], what=key))
                except PathRefused:
                    paths[key] = None
        return self.model_copy(update=paths)


class GateRow(BaseModel):
    """One gate, once: the verdicts a judge gave it (an experiment checks its parity gates at
    the screening and again on the full sweeps) merged into one status with every evidence."""

    name: str
    status: str
    evidence: list[str]


class GateSection(BaseModel):
    """The gates of one judged thing: an experiment (its record's gates: screening and the
    survivor's gate_check), or a sweep a client's gate_check judged."""

    title: str
    experiment_id: str | None = None
    rows: list[GateRow]

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.rows if r.status == "failed"]

    @property
    def not_applicable(self) -> list[str]:
        return [r.name for r in self.rows if r.status == "not_applicable"]


def merged_gates(gates: list[Gate]) -> list[GateRow]:
    """Each gate once, in first-seen order: failed when any verdict failed, else passed when any
    passed, else not applicable; the evidence of every verdict, each once."""
    rows: dict[str, GateRow] = {}
    for g in gates:
        row = rows.setdefault(g.name, GateRow(name=g.name, status=g.status, evidence=[]))
        if g.status == "failed" or (g.status == "passed" and row.status == "not_applicable"):
            row.status = g.status
        if g.evidence not in row.evidence:
            row.evidence.append(g.evidence)
    return list(rows.values())


class ReportData(BaseModel):
    title: str
    session_id: str
    lab: str | None
    stages: list[Stage]
    compares: list[CompareOutput]
    gates: list[GateOutput]
    symbolized: list[Flame]
    attributions: list[AttributeOutput]
    windows: list[WindowRow]
    model_calls: int
    tokens: dict[str, int]
    cost_usd: float
    tool_calls: int
    refused: int
    healed: list[str]
    result_tokens: dict[str, int]
    anchor: str = ""
    """The transcript's head the report rests on: the session's anchor (kept outside the
    database, written when it ended) or, for a session still open, its head right now."""
    experiments: list[Experiment] = []
    rejected: list[Rejected] = []
    bisections: list[Bisection] = []
    traffic: list[TrafficSweepOutput] = []
    """traffic_sweep results (the ladder: throughput, loss and the DUT's CPU per step)."""
    saturations: list[SaturateOutput] = []
    """saturate results (the bracket/bisect windows, the answer, the limit and its check)."""
    unreadable: list[str] = []
    """Results and records this labwarden could not read (another version wrote them), each
    with why: left out of the report, and said so."""
    sessions: list[str] = []
    """Every session the report reads, oldest first (the last is `session_id`): one, or the
    sessions of one lab's ledger."""
    anchors: dict[str, str] = {}
    """Each session's anchor line (`anchor` is the last one's)."""
    labs: list[str] = []
    """The lab names the sessions recorded, each once."""
    declared_counters: dict[str, str] | None = None
    """The profile's own counters ([target] uprobes: counter -> function), named whether or not
    a measurement in these sessions counted them; None: the report was not given the profile."""
    sweep_labels: dict[str, str] = {}
    """Labels of every sweep these sessions took, nested ones too (an experiment's A and B): a
    comparison or a gate names its sweeps by them."""
    gates_of_experiment: dict[str, str] = {}
    """sweep id -> experiment id, for gate_check calls an experiment made (nested): they are
    shown with that experiment's gates, once."""

    @property
    def axis(self) -> str | None:
        """What the workload points count (the sweeps' load axis: clients, streams); None on a
        DUT without a load."""
        return next((s.sweep.axis for s in self.stages), "clients")

    def label(self, sweep_id: str) -> str:
        """A sweep by its stage's label (else its recorded label, else its id)."""
        return next((s.label for s in self.stages if s.sweep.id == sweep_id),
                    self.sweep_labels.get(sweep_id, sweep_id))

    @property
    def cpu_clocks(self) -> str:
        """One line on the windows' CPU clocks: how many came from each, and the coarsest step
        (% of one core, and as a share of that window's figure)."""
        parts = []
        for clock, label in (("schedstat_ns", "schedstat ns"), ("ticks", "ticks")):
            rows = [w for w in self.windows if w.cpu_clock == clock]
            steps = [w for w in rows if w.resolution_pct is not None]
            if not rows:
                continue
            part = f"{len(rows)} from {label}"
            if steps:
                worst = max(steps, key=lambda w: w.resolution_pct or 0.0)
                share = max((100 * (w.resolution_pct or 0.0) / w.cpu_pct for w in steps
                             if w.cpu_pct > 0), default=None)
                part += (f" (step at most {worst.resolution_pct:.2g}% of a core"
                         + (f", {share:.2g}% of a window's figure" if share is not None else "")
                         + ")")
            parts.append(part)
        return f"CPU figures of {len(self.windows)} windows: " + "; ".join(parts) if parts else ""

    def point(self, n: int) -> str:
        """A workload point in the lab's own words: "114 clients", "4 streams", "own workload"."""
        return "own workload" if self.axis is None else f"{n} {self.axis}"

    @property
    def counters(self) -> list[str]:
        """The lab's own counters: the profile's uprobes as declared, then any other a
        measurement counted (an older profile's), in first-seen order."""
        seen: dict[str, None] = dict.fromkeys(self.declared_counters or {})
        for s in self.stages:
            for p in s.sweep.points:
                seen.update(dict.fromkeys(p.counters))
        return list(seen)

    @property
    def measured_counters(self) -> list[str]:
        """The counters some sweep point of this report counted."""
        return [c for c in self.counters
                if any(c in p.counters for s in self.stages for p in s.sweep.points)]

    @property
    def gate_sections(self) -> list[GateSection]:
        """Every gate once per judged thing: each experiment's gates (screening parity and the
        survivor's gate_check merged by name), then each gate_check a client asked for (and any
        an experiment asked for whose record does not hold it)."""
        out: list[GateSection] = []
        shown: set[str] = set()
        for x in self.experiments:
            if not x.gates:
                continue
            out.append(GateSection(title=f"experiment {x.patch_name or x.patch} ({x.id}): "
                                   f"{x.decision}", experiment_id=x.id, rows=merged_gates(list(x.gates))))
            if x.sweep_b and any(g.evidence.startswith("full sweep") or g.name not in
                                 ("offered_load_parity", "declared_parity") for g in x.gates):
                shown.add(x.sweep_b)
        for g in self.gates:
            if g.sweep_id in shown:  # its gates are in that experiment's section
                continue
            owner = self.gates_of_experiment.get(g.sweep_id)
            title = self.label(g.sweep_id) + (f" (inside experiment {owner})" if owner else "")
            out.append(GateSection(title=title, rows=merged_gates(list(g.gates))))
        return out


def _load(records: RecordStore, kind: str, rid: str, cls: type[M], unreadable: list[str]) -> M | None:
    try:
        return records.load(kind, rid, cls)
    except RecordNotFound:  # a record deleted since: the ledger says less, it does not fail
        return None
    except RecordUnreadable as exc:  # another version's record: left out, and said so
        unreadable.append(f"{exc.problem} ({exc.remedy})")
        return None


def _stage(records: RecordStore, rec: SweepRecord, label: str, unreadable: list[str]) -> Stage:
    profs = [_load(records, "prof", p.profile_id, MeasurementRecord, unreadable) for p in rec.points]
    return Stage(label=rec.label or label, sweep=rec, measurements=[p for p in profs if p is not None])


def _experiment(records: RecordStore, exp: Experiment, stages: list[Stage],
                syms: list[Flame], unreadable: list[str], symbolized: Path) -> None:
    """A kept candidate's curves (A and B) are stages; its flame graphs join the symbolized."""
    if exp.decision != "kept":
        return
    labels = (f"{exp.patch_name or exp.patch} base", exp.patch_name or exp.patch)
    for sid, label in zip((exp.sweep_a, exp.sweep_b), labels, strict=True):
        rec = _load(records, "swp", sid, SweepRecord, unreadable) if sid else None
        if rec is not None and all(s.sweep.id != rec.id for s in stages):
            stages.append(_stage(records, rec, label, unreadable))
    f = exp.flame
    if f is not None and f.svg:
        syms.append(Flame(profile_id=f.profile_id, stations=f.stations, samples=f.samples,
                          unknown_pct=f.unknown_pct, baseline_profile_id=f.baseline_profile_id,
                          svg=f.svg, diff_svg=f.diff_svg, baseline_svg=f.baseline_svg,
                          top_deltas=exp.flame_deltas).contained(symbolized))


def collect(store: TranscriptStore, session_id: str, data_dir: Path, title: str,
            earlier: list[str] | None = None, *,
            declared_counters: dict[str, str] | None = None) -> ReportData:
    """The report of a session; `earlier`: sessions read before it (oldest first) -- the ones
    it resumed, or the rest of a lab's ledger. `declared_counters`: the profile's [target]
    uprobes, named in the report whether or not a measurement counted them.

    A client's calls make the sections; a nested call (one a tool such as `experiment` made
    through ctx.call) adds what its parent's record does not hold: its comparison, its gates,
    its sweep's label. Its sweeps and flame graphs come from the parent's record (a kept
    candidate's), so nothing is drawn twice."""
    records = RecordStore(data_dir)
    sessions = [*(earlier or []), session_id]
    infos = [store.session(sid) for sid in sessions]
    stages: list[Stage] = []
    compares: dict[tuple[str, str], CompareOutput] = {}
    gates: dict[str, GateOutput] = {}
    gate_owner: dict[str, str] = {}  # sweep id -> the call id of the experiment that judged it
    sweep_labels: dict[str, str] = {}
    syms: list[Flame] = []
    attrs: list[AttributeOutput] = []
    tokens = {"input": 0, "output": 0, "cache_write": 0, "cache_read": 0}
    cost = 0.0
    calls = refused = model_calls = 0
    healed: list[str] = []
    result_tokens: dict[str, int] = {}
    experiments: list[Experiment] = []
    experiment_of_call: dict[str, str] = {}  # an experiment call's id -> its record's id
    rejected: list[Rejected] = []
    bisections: list[Bisection] = []
    traffic: list[TrafficSweepOutput] = []
    saturations: list[SaturateOutput] = []
    unreadable: list[str] = []
    events = [ev for sid in sessions for ev in store.events(sid)]
    parents = {e.event.call.id: e.event.parent_id for e in events
               if isinstance(e.event, ToolCalled) and e.event.call.id}

    def root(call_id: str) -> str:
        seen = {call_id}
        while (up := parents.get(call_id)) is not None and up not in seen:
            seen.add(up)
            call_id = up
        return call_id

    for ev in events:
        e = ev.event
        if e.kind == "model_call":
            model_calls += 1
            u = e.usage
            tokens["input"] += u.input_tokens
            tokens["output"] += u.output_tokens
            tokens["cache_write"] += u.cache_creation_input_tokens or 0
            tokens["cache_read"] += u.cache_read_input_tokens or 0
            cost += e.cost_usd
        elif e.kind == "guard_decision":
            if e.decision == "refuse":
                refused += 1
            elif e.decision == "heal":
                healed += e.changes
        elif e.kind == "tool_called" and e.parent_id is not None:  # a call a tool made
            if e.call.tool not in ("compare", "gate_check", "sweep") or not e.call.ok:
                continue
            try:
                out = output_of(e.call)
            except UnreadableResult as exc:
                unreadable.append(f"{exc.problem} ({exc.remedy})")
                continue
            match out:
                case CompareOutput():
                    compares.pop((out.baseline, out.candidate), None)
                    compares[(out.baseline, out.candidate)] = out
                case GateOutput():
                    gates.pop(out.sweep_id, None)
                    gates[out.sweep_id] = out
                    gate_owner[out.sweep_id] = root(e.parent_id)
                case SweepOutput() if out.label:
                    sweep_labels[out.sweep_id] = out.label
        elif e.kind == "tool_called":  # a client's call
            calls += 1
            c = e.call
            result_tokens[c.tool] = result_tokens.get(c.tool, 0) + e.result_tokens_est
            if c.tool == "patch_submit" and not c.ok and c.error is not None:
                rejected.append(Rejected(name=str(c.args.get("name", "?")),
                                         code=c.error.code or c.error.kind, reason=c.error.message,
                                         lines=c.error.lines[:8]))
            try:
                out = output_of(c)
            except UnreadableResult as exc:
                unreadable.append(f"{exc.problem} ({exc.remedy})")
                continue
            match out:
                case SweepOutput():
                    rec = _load(records, "swp", out.sweep_id, SweepRecord, unreadable)
                    if rec is not None:  # a sweep whose record is gone has no curve to draw
                        stages.append(_stage(records, rec, rec.id, unreadable))
                case CompareOutput():
                    compares.pop((out.baseline, out.candidate), None)  # asked again: the last
                    compares[(out.baseline, out.candidate)] = out
                case GateOutput():
                    gates.pop(out.sweep_id, None)  # checked again: the last verdict, once
                    gates[out.sweep_id] = out
                    gate_owner.pop(out.sweep_id, None)
                case SymbolizeOutput():
                    syms.append(Flame.of_symbolize(out).contained(data_dir / "symbolized"))
                case AttributeOutput():
                    attrs.append(out)
                case ExperimentOutput():
                    if c.id:
                        experiment_of_call[c.id] = out.experiment_id
                    exp = _load(records, "exp", out.experiment_id, Experiment, unreadable)
                    if exp is not None:
                        experiments.append(exp)
                        _experiment(records, exp, stages, syms, unreadable, data_dir / "symbolized")
                case TrafficSweepOutput():
                    traffic.append(out)
                case SaturateOutput():
                    saturations.append(out)
                case BisectOutput():
                    bis = _load(records, "bis", out.bisect_id, Bisection, unreadable)
                    if bis is not None:
                        bisections.append(bis)
    windows = [WindowRow(stage=s.label, stations=p.stations, rep=w.rep, cpu_pct=w.cpu_pct,
                         build_id=w.conditions.build_id, verified=w.conditions.fingerprint_verified,
                         governors=(f"n/a: {w.conditions.not_applicable['governor']}"
                                    if "governor" in w.conditions.not_applicable
                                    else ",".join(sorted(set(w.conditions.governors)))),
                         boost=w.conditions.boost, clk_tck=w.conditions.clk_tck, host=w.conditions.host,
                         cpu_clock=w.cpu_clock, resolution_pct=w.resolution_pct)
               for s in stages for p in s.measurements for w in p.windows]
    anchors = {sid: _anchor(store, sid) for sid in sessions}
    labs = list(dict.fromkeys(str(i["lab_name"]) for i in infos if i.get("lab_name")))
    return ReportData(title=title, session_id=session_id, lab=infos[-1].get("lab_name"),
                      stages=stages, compares=list(compares.values()), gates=list(gates.values()),
                      symbolized=syms, attributions=attrs,
                      windows=windows, model_calls=model_calls, tokens=tokens, cost_usd=round(cost, 4),
                      tool_calls=calls, refused=refused, healed=healed, result_tokens=result_tokens,
                      anchor=anchors[session_id], experiments=experiments,
                      rejected=rejected, bisections=bisections, traffic=traffic,
                      saturations=saturations, unreadable=unreadable, sessions=sessions,
                      anchors=anchors, labs=labs,
                      declared_counters=None if declared_counters is None else dict(declared_counters),
                      sweep_labels=sweep_labels,
                      gates_of_experiment={sid: experiment_of_call[call]
                                           for sid, call in gate_owner.items()
                                           if call in experiment_of_call})


def _anchor(store: TranscriptStore, session_id: str) -> str:
    anchor = store.anchor(session_id)
    if anchor is not None:
        return f"anchor: {anchor.count} events, head sha256 {anchor.head_hash}"
    head = store.checkpoint(session_id)
    return (f"head when written: {head.count} events, sha256 {head.head_hash} (the session is "
            "still open; its anchor is written when it ends)")
