"""Collect what a report shows from a transcript session and the records it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from labwarden.core.experiments import Bisection, Experiment
from labwarden.core.measurements import ProfileRecord, SweepRecord
from labwarden.core.paths import PathRefused, contained
from labwarden.core.records import RecordNotFound, RecordStore
from labwarden.transcripts.store import TranscriptStore


class Stage(BaseModel):
    label: str
    sweep: SweepRecord
    profiles: list[ProfileRecord]


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


class Rejected(BaseModel):
    """A patch_submit that did not become a candidate (protected path, did not apply or compile)."""

    name: str
    code: str
    reason: str
    lines: list[str]


class ReportData(BaseModel):
    title: str
    session_id: str
    lab: str | None
    stages: list[Stage]
    compares: list[dict[str, Any]]
    gates: list[dict[str, Any]]
    symbolized: list[dict[str, Any]]
    attributions: list[dict[str, Any]]
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
    traffic: list[dict[str, Any]] = []
    """traffic_sweep results (the ladder: throughput, loss and the DUT's CPU per step)."""
    saturations: list[dict[str, Any]] = []
    """saturate results (the bracket/bisect windows, the answer, the limit and its check)."""

    @property
    def axis(self) -> str | None:
        """What the workload points count (the sweeps' load axis: clients, streams); None on a
        DUT without a load."""
        return next((s.sweep.axis for s in self.stages), "clients")

    def point(self, n: int) -> str:
        """A workload point in the lab's own words: "114 clients", "4 streams", "own workload"."""
        return "own workload" if self.axis is None else f"{n} {self.axis}"

    @property
    def counters(self) -> list[str]:
        """The lab's own counters (its profile's uprobes, as measured), in first-seen order."""
        seen: dict[str, None] = {}
        for s in self.stages:
            for p in s.sweep.points:
                seen.update(dict.fromkeys(p.counters))
        return list(seen)


def _load(records: RecordStore, kind: str, rid: str, cls: type[BaseModel]) -> Any:
    try:
        return records.load(kind, rid, cls)
    except RecordNotFound:  # a record deleted since: the ledger says less, it does not fail
        return None


def _experiment(records: RecordStore, exp: Experiment, stages: list[Stage],
                syms: list[dict[str, Any]]) -> None:
    """A kept candidate's curves (A and B) are stages; its flame graphs join the symbolized."""
    if exp.decision != "kept":
        return
    labels = (f"{exp.patch_name or exp.patch} base", exp.patch_name or exp.patch)
    for sid, label in zip((exp.sweep_a, exp.sweep_b), labels, strict=True):
        rec = _load(records, "swp", sid, SweepRecord) if sid else None
        if rec is not None and all(s.sweep.id != rec.id for s in stages):
            profs = [_load(records, "prof", p.profile_id, ProfileRecord) for p in rec.points]
            stages.append(Stage(label=rec.label or label, sweep=rec, profiles=[p for p in profs if p]))
    if exp.flame and exp.flame.get("svg"):
        syms.append({**exp.flame, "dominant_path": [], "functions": [],
                     "top_deltas": [d.model_dump() for d in exp.flame_deltas]})


def collect(store: TranscriptStore, session_id: str, data_dir: Path, title: str,
            earlier: list[str] | None = None) -> ReportData:
    """The report of a session; `earlier`: sessions it resumed (oldest first), read before it."""
    records = RecordStore(data_dir)
    info = store.session(session_id)
    stages: list[Stage] = []
    compares, gates, syms, attrs = [], [], [], []
    tokens = {"input": 0, "output": 0, "cache_write": 0, "cache_read": 0}
    cost = 0.0
    calls = refused = model_calls = 0
    healed: list[str] = []
    result_tokens: dict[str, int] = {}
    experiments: list[Experiment] = []
    rejected: list[Rejected] = []
    bisections: list[Bisection] = []
    traffic: list[dict[str, Any]] = []
    saturations: list[dict[str, Any]] = []
    events = [ev for sid in [*(earlier or []), session_id] for ev in store.events(sid)]
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
        elif e.kind == "tool_called" and e.parent_id is None:  # a client's call: a nested
            # one's effect is reported by its parent (an experiment's record holds its sweeps)
            calls += 1
            c = e.call
            result_tokens[c.tool] = result_tokens.get(c.tool, 0) + e.result_tokens_est
            if c.tool == "patch_submit" and not c.ok and c.error is not None:
                rejected.append(Rejected(name=str(c.args.get("name", "?")),
                                         code=c.error.code or c.error.kind, reason=c.error.message,
                                         lines=c.error.lines[:8]))
            if not c.ok or c.result is None:
                continue
            r = c.result
            if c.tool == "sweep":
                rec = _load(records, "swp", r["sweep_id"], SweepRecord)
                if rec is not None:  # a sweep whose record is gone has no curve to draw
                    profs = [_load(records, "prof", p.profile_id, ProfileRecord) for p in rec.points]
                    stages.append(Stage(label=rec.label or rec.id, sweep=rec,
                                        profiles=[p for p in profs if p is not None]))
            elif c.tool == "compare":
                compares.append(r)
            elif c.tool == "gate_check":
                gates.append(r)
            elif c.tool == "symbolize":
                syms.append(_contained_svgs(r, data_dir / "symbolized"))
            elif c.tool == "attribute":
                attrs.append(r)
            elif c.tool == "experiment":
                exp = _load(records, "exp", r["experiment_id"], Experiment)
                if exp is not None:
                    experiments.append(exp)
                    _experiment(records, exp, stages, syms)
            elif c.tool == "traffic_sweep":
                traffic.append(r)
            elif c.tool == "saturate":
                saturations.append(r)
            elif c.tool == "bisect":
                bis = _load(records, "bis", r["bisect_id"], Bisection)
                if bis is not None:
                    bisections.append(bis)
    labels = {s.sweep.id: s.label for s in stages}
    for cmp in compares:
        cmp["baseline_label"] = labels.get(cmp["baseline"], cmp["baseline"])
        cmp["candidate_label"] = labels.get(cmp["candidate"], cmp["candidate"])
    for g in gates:
        g["label"] = labels.get(g["sweep_id"], g["sweep_id"])
    windows = [WindowRow(stage=s.label, stations=p.stations, rep=w.rep, cpu_pct=w.cpu_pct,
                         build_id=w.conditions.build_id, verified=w.conditions.fingerprint_verified,
                         governors=(f"n/a: {w.conditions.not_applicable['governor']}"
                                    if "governor" in w.conditions.not_applicable
                                    else ",".join(sorted(set(w.conditions.governors)))),
                         boost=w.conditions.boost, clk_tck=w.conditions.clk_tck, host=w.conditions.host)
               for s in stages for p in s.profiles for w in p.windows]
    return ReportData(title=title, session_id=session_id, lab=info.get("lab_name"), stages=stages,
                      compares=compares, gates=gates, symbolized=syms, attributions=attrs,
                      windows=windows, model_calls=model_calls, tokens=tokens, cost_usd=round(cost, 4),
                      tool_calls=calls, refused=refused, healed=healed, result_tokens=result_tokens,
                      anchor=_anchor(store, session_id), experiments=experiments,
                      rejected=rejected, bisections=bisections, traffic=traffic,
                      saturations=saturations)


def _contained_svgs(result: dict[str, Any], root: Path) -> dict[str, Any]:
    """A symbolize result whose SVG paths the report may embed: only files inside the data
    dir's symbolized/ (a path anywhere else is dropped, never read)."""
    out = dict(result)
    for key in ("svg", "baseline_svg", "diff_svg"):
        if isinstance(out.get(key), str):
            try:
                out[key] = str(contained(out[key], [root], what=key))
            except PathRefused:
                out.pop(key)
    return out


def _anchor(store: TranscriptStore, session_id: str) -> str:
    anchor = store.anchor(session_id)
    if anchor is not None:
        return f"anchor: {anchor.count} events, head sha256 {anchor.head_hash}"
    head = store.checkpoint(session_id)
    return (f"head when written: {head.count} events, sha256 {head.head_hash} (the session is "
            "still open; its anchor is written when it ends)")
