"""The morning summary and report of an unattended run, from the transcript and its records.

What was tried, kept and dropped is read from the tool results in the transcript -- the
experiment records (the decision rule's verdict, the gates, the decision and why, the cost),
submissions that never became candidates, bisections, and hand-run build/sweep/compare/gate_check
chains -- never from the model's prose. The model's own final words are quoted, labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from labwarden.core.call import ToolCallRecord
from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.placehealth import HealthStore
from labwarden.report import data as report_data
from labwarden.report import render as report_render
from labwarden.results import UnreadableResult, output_of
from labwarden.results.build import BuildOutput
from labwarden.results.compare import CompareOutput, PointDelta
from labwarden.results.gate_check import GateOutput
from labwarden.results.sweep import SweepOutput
from labwarden.transcripts import timeline
from labwarden.transcripts.pricing import KINDS
from labwarden.transcripts.store import TranscriptStore


@dataclass
class Candidate:
    sweep_id: str
    build_id: str | None
    patches: list[str] = field(default_factory=list)
    cpu: list[tuple[int, float]] = field(default_factory=list)
    compared_to: str | None = None
    verdict: str | None = None
    delta: str = ""
    gates: str | None = None
    gates_passed: bool | None = None

    @property
    def kept(self) -> bool:
        return self.verdict == "improved" and self.gates_passed is True

    def why(self) -> str:
        if self.kept:
            return "improved at the densest point and no gate failed"
        if self.verdict is None:
            return "never compared against a baseline"
        if self.verdict != "improved":
            return f"compare: {self.verdict}"
        return "gates not checked" if self.gates_passed is None else f"gates failed: {self.gates}"


@dataclass
class Findings:
    sweeps: dict[str, Candidate] = field(default_factory=dict)
    compared: list[Candidate] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0


def _calls(store: TranscriptStore, sessions: list[str]) -> list[ToolCallRecord]:
    """The clients' calls, oldest session first (a nested call is its parent's)."""
    out = []
    for sid in reversed(sessions):  # oldest first
        for stored in store.events(sid):
            ev = stored.event
            if isinstance(ev, ToolCalled) and ev.parent_id is None:
                out.append(ev.call)
    return out


def _delta(d: PointDelta) -> str:
    p = "n/a" if d.p_value is None else f"{d.p_value:.3g}"
    return (f"{d.baseline_mean:.2f}% -> {d.candidate_mean:.2f}% at {d.stations} clients "
            f"({d.delta_pp:+.2f} pp, {d.delta_pct:+.1f}%, p={p})")


def findings(store: TranscriptStore, sessions: list[str]) -> Findings:
    f = Findings()
    patches: dict[str, list[str]] = {}
    calls = _calls(store, sessions)
    f.tool_calls = len(calls)
    f.tool_errors = sum(1 for c in calls if not c.ok or not c.result)
    for c in calls:
        try:
            out = output_of(c)
        except UnreadableResult:  # another version's result: the ledger (report data) says so
            continue
        match out:
            case BuildOutput():  # the patches are the call's input (the build id hashes them)
                patches[out.build_id] = [str(p) for p in c.args.get("patches") or []]
            case SweepOutput():
                f.sweeps[out.sweep_id] = Candidate(
                    sweep_id=out.sweep_id, build_id=out.build_id,
                    patches=patches.get(out.build_id or "", []),
                    cpu=[(p.stations, p.cpu_mean) for p in out.points])
            case CompareOutput():
                cand = f.sweeps.setdefault(out.candidate, Candidate(sweep_id=out.candidate,
                                                                    build_id=out.candidate_build))
                cand.compared_to, cand.verdict = out.baseline, out.verdict
                if out.deltas:
                    cand.delta = _delta(out.deltas[-1])
                if cand not in f.compared:
                    f.compared.append(cand)
            case GateOutput():
                gated = f.sweeps.get(out.sweep_id)
                if gated is not None:
                    gated.gates_passed = not out.failed
                    na = out.not_applicable
                    gated.gates = (", ".join(out.failed) if out.failed else "none failed") \
                        + (f" ({', '.join(na)} not applicable here)" if na else "")
    return f


def _counters(x: Experiment, ledger: report_data.ReportData) -> str:
    """The lab's own counters at the densest point of a survivor's full sweeps, A -> B."""
    sweeps = {s.sweep.id: s.sweep for s in ledger.stages}
    a, b = sweeps.get(x.sweep_a or ""), sweeps.get(x.sweep_b or "")
    if a is None or b is None or not a.points or not b.points:
        return ""
    ca, cb = a.points[-1].counters, b.points[-1].counters
    names = [n for n in cb if n in ca]
    if not names:
        return ""
    return "; counters " + ", ".join(f"{n} {ca[n]:.1f}/s -> {cb[n]:.1f}/s" for n in names)


def _experiment_line(x: Experiment, ledger: report_data.ReportData | None = None) -> str:
    look = x.screening.looks[-1] if x.screening and x.screening.looks else None
    base = "+".join(x.base_patches) or x.ref
    where = (x.screening.workload or f"{x.screening.stations} clients") if x.screening else ""
    nums = (f"{look.mean_a:.2f} -> {look.mean_b:.2f} at {where} "
            f"({look.delta_pct:+.1f}%, {look.interval_text()}, {look.verdict} after "
            f"{look.n_a}+{look.n_b} windows)"
            if look and x.screening else "not measured")
    nums += _counters(x, ledger) if ledger is not None else ""
    at = f", on place {x.place}" if x.place else ""
    return (f"- `{x.patch}` on {base} ({x.id}{at}): {nums} -- {x.reason} (cost ${x.cost.usd:.4f}, "
            f"{x.cost.tokens:,} tokens, {x.cost.lab_seconds:.0f} s of lab)")


def _curve(c: Candidate) -> str:
    return ", ".join(f"{cpu:.2f}%@{n}" for n, cpu in c.cpu) or "-"


def markdown(store: TranscriptStore, sessions: list[str], *, goal: str, stop: str, detail: str,
             final_text: str, report: Path | None = None, data_dir: Path | None = None) -> str:
    """summary.md: goal, why it stopped, kept / dropped with their numbers, and what it cost."""
    f = findings(store, sessions)
    ledger = report_data.collect(store, sessions[0], data_dir or _data_dir(store), "summary",
                                 earlier=list(reversed(sessions[1:])))
    by = {d: [x for x in ledger.experiments if x.decision == d]
          for d in ("kept", "dropped", "refuted", "failed")}
    tls = [timeline.of_session(store, sid) for sid in reversed(sessions)]
    tokens = {k: sum(t.totals.tokens[k] for t in tls) for k in KINDS}
    usd = sum(t.totals.cost_usd for t in tls)
    calls = sum(t.totals.model_calls for t in tls)
    lines = [f"# labwarden loop: {goal}", "",
             f"- **Stopped:** {stop} -- {detail}",
             f"- **Sessions:** {', '.join(reversed(sessions))}"
             + (" (resumed after an interruption)" if len(sessions) > 1 else ""),
             f"- **Model calls:** {calls}; tokens: " + ", ".join(f"{k} {n:,}" for k, n in tokens.items()),
             f"- **Cost:** ${usd:.4f} (from the transcript's model_call events and the price table)",
             f"- **Tool calls:** {f.tool_calls} ({f.tool_errors} failed or refused)"]
    if report is not None:
        lines.append(f"- **Report:** {report}")
    for sid in reversed(sessions):
        lines.append(f"- **Transcript anchor** of {sid}: {anchor_line(store, sid)}")
    kept = [c for c in f.compared if c.kept]
    dropped = [c for c in f.compared if not c.kept]
    lines.append(f"- **Candidates judged:** {len(ledger.experiments)} ("
                 + ", ".join(f"{len(v)} {k}" for k, v in by.items()) + f"), "
                 f"{len(ledger.rejected)} rejected at submission")
    lines += ["", "## Kept", ""]
    lines += [_experiment_line(x, ledger) for x in by["kept"]]
    lines += [f"- build {c.build_id} (patches {', '.join(c.patches) or 'none'}), sweep {c.sweep_id}: "
              f"{c.delta}; gates {c.gates}" for c in kept]
    if not by["kept"] and not kept:
        lines.append("- nothing")
    lines += ["", "## Dropped", ""]
    lines += [_experiment_line(x, ledger) for x in by["dropped"]]
    lines += [f"- build {c.build_id} (patches {', '.join(c.patches) or 'none'}), sweep {c.sweep_id}: "
              f"{c.delta or 'no numbers'} -- {c.why()}" for c in dropped]
    if not by["dropped"] and not dropped:
        lines.append("- nothing")
    for title, key in (("Refuted (the rule decided: no effect)", "refuted"),
                       ("Failed (could not be judged)", "failed")):
        if by[key]:
            lines += ["", f"## {title}", "", *(_experiment_line(x) for x in by[key])]
    health = HealthStore(data_dir or _data_dir(store)).all()
    if health:
        lines += ["", "## Places (fleet health)", ""]
        lines += [f"- {h.place}: {h.state} since {h.since:%Y-%m-%d %H:%M:%S} UTC"
                  + (f" -- {h.reason}" if h.reason else "") for h in health.values()]
    if ledger.rejected:
        lines += ["", "## Rejected at submission", ""]
        lines += [f"- `{r.name}`: {r.code}: {r.reason}"
                  + (f" -- `{' | '.join(r.lines[:3])}`" if r.lines else "") for r in ledger.rejected]
    if ledger.bisections:
        lines += ["", "## Bisections", ""]
        lines += [f"- {b.good}..{b.bad} ({b.metric}): {b.outcome} -- {b.reason}" for b in ledger.bisections]
    if ledger.counters:
        lines += ["", "## This lab's counters", "",
                  f"- {', '.join(ledger.counters)} (the profile's [target] uprobes, calls/s; "
                  f"workload: {ledger.axis or 'its own, no load axis'})"]
    lines += ["", "## Sweeps measured", ""]
    lines += [f"- {c.sweep_id}: build {c.build_id} (patches {', '.join(c.patches) or 'none'}): {_curve(c)}"
              for c in f.sweeps.values()] or ["- none"]
    lines += ["", "## The model's last words (its claim, not a measurement)", ""]
    lines += ["> " + ln for ln in (final_text or "(none)").splitlines()]
    return "\n".join(lines) + "\n"


def anchor_line(store: TranscriptStore, session_id: str) -> str:
    """The session's anchor (written outside the database when it ended): what `transcripts
    audit` checks the database against."""
    try:
        cp = store.anchor(session_id)
    except Exception as exc:  # an unreadable anchor is itself worth saying
        return f"unreadable ({exc})"
    if cp is None:
        return "none (the session did not end cleanly)"
    return f"{cp.count} events, head sha256 {cp.head_hash} ({store.anchor_path(session_id)})"


def _data_dir(store: TranscriptStore) -> Path:
    """The lab's data dir: the transcript lives in it (runtime.session.default_transcript)."""
    return Path(store.path).parent


def html_report(store: TranscriptStore, sessions: list[str], title: str,
                data_dir: Path | None = None, declared_counters: dict[str, str] | None = None) -> str:
    """The full HTML report of a run (newest session first, then the ones it resumed): curves
    of every stage and of every kept candidate, before/after/differential flame graphs, the
    experiment ledger, tokens and cost."""
    d = report_data.collect(store, sessions[0], data_dir or _data_dir(store), title,
                            earlier=list(reversed(sessions[1:])), declared_counters=declared_counters)
    return report_render.render(d)
