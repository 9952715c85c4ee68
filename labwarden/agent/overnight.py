"""`labwarden loop --lab lab.toml --goal "..." --budget-usd N --until HH:MM`: the unattended
patch-measure loop. The model works through the lab's tools until it declares `DONE:`, or the
budget, the deadline or the turn cap stops it; then OUT/summary.md and OUT/report.html are
written. `--resume SESSION` continues an interrupted run from its transcript in a new session.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from labwarden.agent import summary
from labwarden.agent.loop import (
    CONFIG,
    STOP,
    Agent,
    Limits,
    Message,
    Outcome,
    resumed_messages,
    saved_state,
    take_over_lease,
)
from labwarden.agent.model import Model, ModelOptions
from labwarden.cli import agentopts as options
from labwarden.cli.agentopts import BaseUrlOpt, BudgetOpt, LabOpt, MaxTurnsOpt, ModelOpt
from labwarden.core.events import Note
from labwarden.lab.config import LabProfile
from labwarden.server.prompts import load, prompt_dir
from labwarden.tools.context import open_lab
from labwarden.transcripts.store import TranscriptError

console = Console(stderr=True)
out = Console()


def parse_until(text: str, now: datetime | None = None) -> datetime:
    """HH:MM in local time, today -- or tomorrow if that has passed. Raises ValueError."""
    now = now or datetime.now().astimezone()
    hh, mm = text.split(":")
    t = now.replace(hour=int(hh), minute=int(mm), second=0, microsecond=0)
    return t if t > now else t + timedelta(days=1)


def system_prompt(goal: str) -> str:
    return load(prompt_dir() / "overnight-loop.md").render(goal=goal)


def kickoff(goal: str, limits: Limits) -> str:
    budget = f"${limits.budget_usd:g}" if limits.budget_usd is not None else "the lab profile's"
    until = f"{limits.until:%Y-%m-%d %H:%M %Z}" if limits.until else "none"
    return (f"Goal: {goal}\nBudget: {budget} for model calls. Deadline: {until}.\n"
            "Start with `lab_status`, then work the loop. Nobody is watching: decide for yourself, "
            "and end with `DONE:` and the summary.")


@dataclass
class LoopResult:
    session_id: str
    outcome: Outcome
    summary: Path
    report: Path


async def run_loop(profile: LabProfile, opts: ModelOptions, *, goal: str | None, limits: Limits,
                   out_dir: Path | None, resume: str | None) -> LoopResult:
    model = Model(opts)
    hooks = options.printing_hooks(console, model.totals, stream_text=True)
    try:
        async with open_lab(profile, progress=options.progress_printer(console), client="loop") as ctx:
            assert ctx.transcript is not None and ctx.session_id is not None
            store, sid = ctx.transcript, ctx.session_id
            chain: list[str] = []
            config: dict[str, object] = {"mode": "loop", "model": opts.model}
            if resume:
                saved = saved_state(store, resume)
                goal = goal or str(saved.config.get("goal") or "")
                if limits.budget_usd is None and saved.config.get("budget_usd") is not None:
                    limits.budget_usd = float(saved.config["budget_usd"])
                if limits.until is None and saved.config.get("until"):
                    limits.until = datetime.fromisoformat(str(saved.config["until"]))
                model.totals.carried_usd, model.totals.carried_tokens = saved.spent_usd, saved.tokens
                messages: list[Message] = resumed_messages(saved)
                chain = saved.chain
                config |= {"resumed_from": saved.session_id, "chain": chain,
                           "carried_usd": saved.spent_usd, "carried_tokens": saved.tokens}
                ctx.log(Note(author="labwarden", text=f"resumes session {saved.session_id} "
                             f"({len(saved.messages)} messages, ${saved.spent_usd:.4f} spent before)"))
                took = await take_over_lease(ctx, chain)
                if took:
                    ctx.log(Note(author="labwarden", text=f"took over the DUT lease of {took} (resumed)"))
            if not goal:
                raise TranscriptError("no goal", "pass --goal (or --resume a loop session)")
            config |= {"goal": goal, "budget_usd": limits.budget_usd,
                       "until": limits.until.isoformat() if limits.until else None}
            if not resume:
                messages = [{"role": "user", "content": kickoff(goal, limits)}]
            agent = Agent(ctx, model, system_prompt(goal), hooks=hooks, messages=messages)
            agent.note(CONFIG, config)
            agent.note_state()  # the start is resumable too
            console.print(f"[dim]labwarden loop: session {sid}"
                          + (f", resuming {chain[0]}" if chain else "") + "[/dim]")
            outcome = await agent.run(limits, unattended=True)
            agent.note(STOP, {"stop": outcome.stop, "detail": outcome.detail})
            target = out_dir or ctx.data_dir / "loops" / sid
            target.mkdir(parents=True, exist_ok=True)
            report = target / "report.html"
            report.write_text(summary.html_report(store, sid))
            md = target / "summary.md"
            md.write_text(summary.markdown(store, [sid, *chain], goal=goal, stop=outcome.stop,
                                           detail=outcome.detail, final_text=outcome.final_text,
                                           report=report))
            return LoopResult(session_id=sid, outcome=outcome, summary=md, report=report)
    finally:
        await model.close()


def loop(lab: LabOpt = options.DEFAULT_LAB,
         goal: Annotated[str | None, typer.Option(help="what to improve (default: from the prompt; "
                                                  "with --resume: the resumed run's)")] = None,
         budget_usd: BudgetOpt = None,
         until: Annotated[str | None, typer.Option(
             help="stop at HH:MM local time (tomorrow if past)")] = None,
         resume: Annotated[str | None, typer.Option(help="continue this loop session from the "
                                                    "transcript, in a new session")] = None,
         out_dir: Annotated[Path | None, typer.Option(
             "--out", help="where summary.md and report.html go (default: DATA/loops/SESSION)")] = None,
         model: ModelOpt = options.DEFAULT_MODEL, base_url: BaseUrlOpt = None,
         max_turns: MaxTurnsOpt = 60) -> None:
    """Run the unattended patch-measure loop to a goal, within a budget and a deadline; writes a
    morning summary (markdown) and an HTML report; --resume continues an interrupted run."""
    profile, opts = options.load(console, lab, model, base_url)
    try:
        deadline = parse_until(until) if until else None
    except ValueError:
        options.fail(console, f"--until must be HH:MM, got {until!r}", "e.g. --until 06:30", 2)
    if goal is None and resume is None:
        goal = load(prompt_dir() / "overnight-loop.md").arguments[0]["default"]
    from labwarden.agent.model import ModelUnavailable
    from labwarden.lab.dut.errors import DeviceError

    limits = Limits(budget_usd=budget_usd, until=deadline, max_turns=max_turns)
    try:
        res = asyncio.run(run_loop(profile, opts, goal=goal, limits=limits, out_dir=out_dir, resume=resume))
    except (ModelUnavailable, DeviceError, TranscriptError) as exc:
        options.fail(console, exc.problem, exc.remedy)
    out.print(f"stopped: {res.outcome.stop} -- {res.outcome.detail}\nsession: {res.session_id}\n"
              f"summary: {res.summary}\nreport:  {res.report}", markup=False, highlight=False, soft_wrap=True)
    if res.outcome.stop == "api_unavailable":
        raise typer.Exit(1)
