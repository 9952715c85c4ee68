"""Collect what a report shows from a transcript session and the records it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from labwarden.core.measurements import ProfileRecord, SweepRecord
from labwarden.core.records import RecordStore
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


def collect(store: TranscriptStore, session_id: str, data_dir: Path, title: str) -> ReportData:
    records = RecordStore(data_dir)
    info = store.session(session_id)
    stages: list[Stage] = []
    compares, gates, syms, attrs = [], [], [], []
    tokens = {"input": 0, "output": 0, "cache_write": 0, "cache_read": 0}
    cost = 0.0
    calls = refused = model_calls = 0
    healed: list[str] = []
    result_tokens: dict[str, int] = {}
    for ev in store.events(session_id):
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
        elif e.kind == "tool_called":
            calls += 1
            c = e.call
            result_tokens[c.tool] = result_tokens.get(c.tool, 0) + e.result_tokens_est
            if not c.ok or c.result is None:
                continue
            r = c.result
            if c.tool == "sweep":
                rec = records.load("swp", r["sweep_id"], SweepRecord)
                profs = [records.load("prof", p.profile_id, ProfileRecord) for p in rec.points]
                stages.append(Stage(label=rec.label or rec.id, sweep=rec, profiles=profs))
            elif c.tool == "compare":
                compares.append(r)
            elif c.tool == "gate_check":
                gates.append(r)
            elif c.tool == "symbolize":
                syms.append(r)
            elif c.tool == "attribute":
                attrs.append(r)
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
                      tool_calls=calls, refused=refused, healed=healed, result_tokens=result_tokens)
