"""`labwarden run PLAYBOOK.toml`: run a playbook with a progress display and a summary table;
`labwarden demo`: the same for the WiFi-daemon field study's story, on a vlab brought up and down
around it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from labwarden.cli.common import DEFAULT_LAB, LabOpt, err, fail, fail_on, load_profile, out, show_failure
from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError
from labwarden.core.nesting import clip_text
from labwarden.lab.config import LabProfile
from labwarden.playbook import model
from labwarden.playbook.run import RunRecord, run
from labwarden.qlab import control as qlab_control
from labwarden.results import output_of
from labwarden.results.compare import CompareOutput
from labwarden.results.gate_check import GateOutput
from labwarden.results.report import ReportOutput
from labwarden.results.sweep import SweepOutput
from labwarden.runtime.session import open_lab
from labwarden.vlab import control

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
PLAYBOOK = PLAYBOOKS / "vlab-hotspot.toml"
DEMO_DIR = Path(".vlab") / "demo"
LAB_KINDS: dict[str, tuple[Callable[..., Any], Callable[[Path], list[int]]]] = {
    "vlab": (control.up, control.down), "qlab": (qlab_control.up, qlab_control.down)}
"""`demo --lab-kind`: how each lab comes up (returns info with .ssh and .lab_toml) and down."""
M = TypeVar("M", bound=BaseModel)


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise typer.BadParameter(f"--set {item!r}: expected NAME=VALUE, e.g. --set window_s=3")
        try:
            values[key] = json.loads(clip_text(raw))  # nested too deep: cut, the runner refuses
        except json.JSONDecodeError:
            values[key] = raw
    return values


async def execute(profile: LabProfile, book: model.Playbook, console: Console = out) -> RunRecord:
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        TextColumn("[dim]{task.fields[detail]}"), console=console, transient=False)
    overall = progress.add_task(book.name, total=len(book.steps), detail="")

    async def on_progress(done: float, total: float | None, message: str) -> None:
        progress.update(overall, detail=message[:70])

    async def on_step(i: int, step: model.Step, rec: ToolCallRecord | None) -> None:
        if rec is None:
            progress.update(overall, description=f"{step.id}: {step.tool}", detail=step.title or "")
            return
        progress.advance(overall)
        mark = "[green]ok[/green]" if rec.ok else "[red]failed[/red]"
        progress.console.print(f"  {mark} {step.id} ({step.tool}, {rec.duration_s:.1f} s)"
                               + (f": {escape(step.title)}" if step.title else ""))
        if not rec.ok and rec.error:
            show_failure(progress.console, rec.error.message, rec.error.remedy, indent="    ")

    with progress:
        async with open_lab(profile, progress=on_progress, client="playbook") as ctx:
            return await run(ctx, book, on_step)


def _results(rec: RunRecord, model: type[M]) -> list[tuple[str, M]]:
    """(step id, result) of every step whose result is a `model` (its tool's output)."""
    found = []
    for s in rec.steps:
        out = output_of(s.record)
        if isinstance(out, model):
            found.append((s.id, out))
    return found


def summary(rec: RunRecord) -> list[Table]:
    tables = []
    sweeps = _results(rec, SweepOutput)
    if sweeps:
        dens = [p.stations for p in sweeps[0][1].points]
        t = Table(title="target CPU % of one core (mean ± stdev) per stage")
        t.add_column("stage")
        for n in dens:
            t.add_column(f"{n} clients", justify="right")
        for sid, sw in sweeps:
            t.add_row(sw.label or sid, *[f"{p.cpu_mean:.2f} ± {p.cpu_stdev:.2f}" for p in sw.points])
        tables.append(t)
    compares = _results(rec, CompareOutput)
    if compares:
        labels = {sw.sweep_id: sw.label or sid for sid, sw in sweeps}
        t = Table(title="A/B at the densest point")
        for col in ("baseline -> candidate", "Δ pp", "Δ %", "p", "verdict"):
            t.add_column(col, justify="left" if col[0] in "bv" else "right")
        for _, cmp in compares:
            d = cmp.deltas[-1]
            base = labels.get(cmp.baseline, cmp.baseline)
            cand = labels.get(cmp.candidate, cmp.candidate)
            t.add_row(f"{base} -> {cand}", f"{d.delta_pp:+.2f}", f"{d.delta_pct:+.1f}",
                      str(d.p_value), d.verdict)
        tables.append(t)
    gates = _results(rec, GateOutput)
    if gates:
        t = Table(title="gates")
        t.add_column("step")
        t.add_column("result")
        for sid, g in gates:
            na = g.not_applicable
            judged = len(g.gates) - len(na)
            t.add_row(sid, (f"all {judged} passed" + (f" ({len(na)} not applicable)" if na else ""))
                      if g.passed else "FAILED: " + ", ".join(g.failed))
        tables.append(t)
    unmet = [(s.id, e) for s in rec.steps for e in s.expectations]
    if unmet:
        t = Table(title="expectations not met")
        t.add_column("step")
        t.add_column("expectation")
        for sid, e in unmet:
            t.add_row(sid, e)
        tables.append(t)
    return tables


def _report_and_tally(rec: RunRecord) -> None:
    for table in summary(rec):
        out.print(table)
    report = next((r for _, r in _results(rec, ReportOutput)), None)
    if report:
        out.print(f"report: {report.path}")


def run_cmd(
    playbook: Annotated[Path, typer.Argument(help="playbook TOML, e.g. playbooks/vlab-hotspot.toml")],
    lab: LabOpt = DEFAULT_LAB,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a var: NAME=VALUE "
                                                   "(JSON), repeatable")] = None,
) -> None:
    """Run a playbook: a deterministic sequence of tool calls (no model) through the same guard and
    transcript as any agent; prints each step, a summary, and the report path if it writes one."""
    profile = load_profile(lab)
    try:
        book = model.load(playbook, _parse_sets(set_ or []))
    except model.PlaybookError as exc:
        fail_on(exc, 2)
    try:
        rec = asyncio.run(execute(profile, book))
    except LabError as exc:  # the lab could not be opened: unreachable, host key, place held
        fail_on(exc)
    _report_and_tally(rec)
    out.print(f"run {rec.id}: {len(rec.steps)} steps in {rec.duration_s:.0f} s; transcript session "
              f"{rec.session_id}" + ("" if rec.ok else f"; [red]stopped at {rec.stopped_at}[/red]"))
    raise typer.Exit(0 if rec.ok and not any(s.expectations for s in rec.steps) else 1)


def demo(dir: Annotated[Path | None, typer.Option("--dir", help="lab state directory (default "
                                                  ".vlab/demo or .qlab/demo)")] = None,
         playbook: Annotated[Path | None, typer.Option(help="the story to run (default: the lab "
                                                       "kind's hotspot playbook)")] = None,
         window: Annotated[float | None, typer.Option(help="seconds per measurement window "
                                                      "(default: the playbook's)")] = None,
         reps: Annotated[int | None, typer.Option(help="windows per density (default: the "
                                                  "playbook's)")] = None,
         lab_kind: Annotated[str, typer.Option("--lab-kind", help="vlab (fast, labwarden's own DUT) "
                                               "or qlab (a Debian kernel under QEMU with real "
                                               "802.11 clients; slow under TCG)")] = "vlab") -> None:
    """Tell the WiFi-daemon field study's story on a lab brought up and down around it: the vlab
    (default) or the qlab. Runs the lab's hotspot playbook (baseline, flame graph, attribution, fixes, a patch
    refuted, gates), prints the summary and the report path."""
    if lab_kind not in LAB_KINDS:
        fail(f"--lab-kind {lab_kind!r} is not a lab kind", f"use one of {', '.join(LAB_KINDS)}", 2)
    up, down = LAB_KINDS[lab_kind]
    dir = dir or Path(f".{lab_kind}") / "demo"
    playbook = playbook or PLAYBOOKS / f"{lab_kind}-hotspot.toml"
    sets = {k: v for k, v in (("window_s", window), ("reps", reps)) if v is not None}
    try:
        book = model.load(playbook, sets)
    except model.PlaybookError as exc:
        fail(exc.problem, f"pass --playbook with a valid playbook ({playbook.name})", 2)
    try:
        with err.status(f"{lab_kind} up") as st:
            down(dir)
            info = up(dir, progress=lambda m: st.update(f"{lab_kind} up: {m}"))
        out.print(f"{lab_kind} up: ssh {info.ssh}, profile {info.lab_toml}")
        rec = asyncio.run(execute(LabProfile.from_file(info.lab_toml), book))
    except LabError as exc:  # the lab would not come up, or its DUT would not answer
        fail_on(exc)
    finally:
        stopped = down(dir)
        err.print(f"{lab_kind} down: stopped {len(stopped)} process(es)")
    _report_and_tally(rec)
    db = Path(info.lab_toml).parent / "data" / "transcripts.db"
    out.print(f"{len(rec.steps)} steps in {rec.duration_s:.0f} s; replay it: labwarden transcripts "
              f"replay {rec.session_id} --db {db}")
    if not rec.ok:
        raise typer.Exit(1)
