"""`labwarden chat` and `labwarden loop`: a Claude model with the lab's tools, in-process (guarded
and logged like every other door). Both stream the model's text, show each tool call with its
progress and outcome, and a running line of tokens and dollars after every model call.

chat talks with a person until the input ends; loop runs unattended to a goal (the library half
is labwarden/agent/overnight.py) and writes a morning summary and report.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from labwarden.agent import calibrated, overnight
from labwarden.agent.loop import CONFIG, Agent, Hooks, Limits, Outcome
from labwarden.agent.model import DEFAULT_MODEL, Model, ModelOptions, Totals, check_priced
from labwarden.agent.planner import PatchPlanner
from labwarden.cli.common import DEFAULT_LAB, LabOpt, err, fail, fail_on, load_profile, out
from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile
from labwarden.prompts import load, prompt_dir
from labwarden.runtime.session import open_lab
from labwarden.tools import registry
from labwarden.tools.context import ProgressFn
from labwarden.transcripts.pricing import UnknownModel

ModelOpt = Annotated[str, typer.Option("--model", help="model id (must be in the price table)")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", help="Messages API base URL (default: ANTHROPIC_BASE_URL, else Anthropic's)")]
BudgetOpt = Annotated[float | None, typer.Option(
    "--budget-usd", help="stop before a model call once this many dollars are spent")]
MaxTurnsOpt = Annotated[int, typer.Option("--max-turns", help="model calls per request: a safety cap")]
QUIT = {"/quit", "/exit", "exit", "quit"}


def _model(lab: Path, model: str, base_url: str | None) -> tuple[LabProfile, Model]:
    """The profile and a model client, checked before any lab is opened: a bad profile, an
    unpriced model or a missing API key each end here with their remedy."""
    profile = load_profile(lab)
    try:
        check_priced(model)
    except UnknownModel as exc:
        fail(exc.problem, "pick a priced model with --model, or add it to the price table", 2)
    try:
        return profile, Model(ModelOptions(model=model, base_url=base_url))
    except LabError as exc:
        fail_on(exc)


def tool_line(record: ToolCallRecord) -> str:
    if record.ok:
        return f"[green]✓[/green] {record.tool} ({record.duration_s:.1f} s)"
    e = record.error
    assert e is not None
    what = f"{e.code or e.kind}: {e.message}" + (f" -- remedy: {e.remedy}" if e.remedy else "")
    return f"[red]✗[/red] {record.tool} {escape(what)}"


def printing_hooks(console: Console, totals: Totals) -> Hooks:
    """Show streamed text, each tool call (its progress is printed live by `progress_printer`)
    and its outcome, and the running token/cost line after every model call."""
    state = {"midline": False}

    def on_text(delta: str) -> None:
        console.print(delta, end="", markup=False, highlight=False, soft_wrap=True)
        state["midline"] = not delta.endswith("\n")

    def newline() -> None:
        if state["midline"]:
            console.print()
            state["midline"] = False

    def on_turn_end(message: object) -> None:
        newline()
        console.print(f"[dim]{totals.line()}[/dim]", soft_wrap=True)

    def on_tool_start(name: str, args: dict[str, object]) -> None:
        newline()
        console.print(f"[cyan]→ {escape(name)}[/cyan] [dim]{escape(str(args))}[/dim]")

    def on_tool_end(record: ToolCallRecord) -> None:
        console.print("  " + tool_line(record), soft_wrap=True)

    def on_retry(attempt: int, delay: float, why: str) -> None:
        newline()
        console.print(f"[yellow]model API: {escape(why)}; retry {attempt} in {delay:g} s[/yellow]")

    return Hooks(on_text=on_text, on_turn_end=on_turn_end, on_tool_start=on_tool_start,
                 on_tool_end=on_tool_end, on_retry=on_retry)


def progress_printer(console: Console) -> ProgressFn:
    async def progress(done: float, total: float | None, message: str) -> None:
        console.print(f"  [dim]· {escape(message)}[/dim]", soft_wrap=True)
    return progress


# ---- chat ----------------------------------------------------------------------------------

def chat_prompt(question: str | None, profile: LabProfile) -> str:
    return load(prompt_dir() / "hunt-a-hotspot.md").render([s.name for s in registry.listed(profile)],
                                                         question=question)


async def _lines(given: list[str], read: Callable[[str], str]) -> AsyncIterator[str]:
    if given:
        for text in given:
            out.print(f"[bold]you>[/bold] {escape(text)}", highlight=False)
            yield text
        return
    while True:
        try:
            text = await asyncio.to_thread(read, "you> ")
        except EOFError:
            return
        if text.strip() in QUIT:
            return
        if text.strip():
            yield text


async def run_chat(profile: LabProfile, model: Model, *, limits: Limits, question: str | None,
                   messages: list[str], read: Callable[[str], str] = input) -> Outcome | None:
    """Talk until the input ends (or a budget stops it); returns the last outcome. Closes `model`."""
    outcome = None
    try:
        async with open_lab(profile, progress=progress_printer(out), client="chat") as ctx:
            agent = Agent(ctx, model, chat_prompt(question, profile),
                          hooks=printing_hooks(out, model.totals))
            agent.note(CONFIG, {"mode": "chat", "model": model.options.model, "question": question,
                                "budget_usd": limits.budget_usd})
            out.print(f"[dim]labwarden chat: session {ctx.session_id}, model {model.options.model}; "
                      "/quit or end of input to leave[/dim]", soft_wrap=True)
            async for text in _lines(messages, read):
                outcome = await agent.send(text, limits)
                if outcome.stop not in ("waiting", "done"):
                    out.print(f"[yellow]stopped ({outcome.stop}): {escape(outcome.detail)}[/yellow]")
                    if outcome.stop in ("budget", "api_unavailable"):
                        break
            out.print(f"[dim]session {ctx.session_id}: {model.totals.calls} model calls, "
                      f"{model.totals.line()}[/dim]", soft_wrap=True)
    finally:
        await model.close()
    return outcome


def chat(lab: LabOpt = DEFAULT_LAB, model: ModelOpt = DEFAULT_MODEL,
         base_url: BaseUrlOpt = None, budget_usd: BudgetOpt = None, max_turns: MaxTurnsOpt = 30,
         message: Annotated[list[str] | None, typer.Option(
             "--message", "-m", help="send this instead of reading stdin; repeatable")] = None,
         question: Annotated[str | None, typer.Option(
             help="the question of the hunt-a-hotspot system prompt")] = None) -> None:
    """Talk to a Claude model that has the lab's tools (ANTHROPIC_API_KEY; every call logged and priced)."""
    profile, client = _model(lab, model, base_url)
    limits = Limits(budget_usd=budget_usd, max_turns=max_turns)
    try:
        outcome = asyncio.run(run_chat(profile, client, limits=limits, question=question,
                                       messages=message or []))
    except LabError as exc:  # the API stayed unreachable, the DUT did not answer, ...
        fail_on(exc)
    if outcome is not None and outcome.stop in ("budget", "api_unavailable"):
        raise typer.Exit(1)


# ---- loop ----------------------------------------------------------------------------------

def loop(lab: LabOpt = DEFAULT_LAB,
         goal: Annotated[str | None, typer.Option(help="what to improve (default: from the prompt; "
                                                  "with --resume: the resumed run's)")] = None,
         budget_usd: BudgetOpt = None,
         until: Annotated[str | None, typer.Option(
             help="stop at HH:MM local time (tomorrow if past)")] = None,
         resume: Annotated[str | None, typer.Option(help="continue this loop session from the "
                                                    "transcript, in a new session (without it, an "
                                                    "unfinished run of the same goal and lab is "
                                                    "resumed by itself)")] = None,
         fresh: Annotated[bool, typer.Option("--fresh", help="start a new run even if one of this "
                                             "goal was interrupted")] = False,
         out_dir: Annotated[Path | None, typer.Option(
             "--out", help="where summary.md and report.html go (default: DATA/loops/SESSION)")] = None,
         model: ModelOpt = DEFAULT_MODEL, base_url: BaseUrlOpt = None,
         max_turns: Annotated[int | None, typer.Option(
             "--max-turns", help="model calls at most (default: sized from --budget-usd)")] = None,
         planner: Annotated[str, typer.Option(
             "--planner", help="who plans the night: 'model' (a Claude model: ANTHROPIC_API_KEY) "
             "or 'patches' (scripted, no key: each patch file of --patches, in name order, "
             "patch_submit then experiment; config-value candidates are not supported yet)")
         ] = "model",
         patches: Annotated[Path | None, typer.Option(
             "--patches", help="with --planner patches: a directory of unified diffs (*.patch, "
             "*.diff), each judged against the firmware's HEAD")] = None,
         calibration_max_age: Annotated[float, typer.Option(
             "--calibration-max-age", min=0.0, max=24 * 365.0,
             help="hours a calibration of the base build with this [decision] may be old for "
             "the night to rest on it; without one the loop calibrates first, and refuses to "
             "start when min_effect_pct is not decidable")] = calibrated.MAX_AGE_H,
         skip_calibration: Annotated[bool, typer.Option(
             "--skip-calibration", help="start without checking the rule against the lab's "
             "noise (written in the transcript and the summary)")] = False) -> None:
    """Run the unattended patch-measure loop to a goal, within a budget and a deadline; writes a
    morning summary (markdown) and the HTML report; the same command after a crash resumes it.
    `--planner patches --patches DIR` runs the same loop without a model or an API key. It starts
    only on a rule the lab can decide: a calibration (the `calibrate` tool) is found or made
    first."""
    try:
        deadline = overnight.parse_until(until) if until else None
    except ValueError:
        fail(f"--until must be HH:MM, got {until!r}", "e.g. --until 06:30", 2)
    client: Model
    if planner == "patches":
        if patches is None:
            fail("--planner patches needs --patches DIR", "give a directory of *.patch files", 2)
        profile = load_profile(lab)
        try:
            client = PatchPlanner.of(patches)
        except LabError as exc:
            fail_on(exc, 2)
        if goal is None and resume is None:
            goal = f"judge the patches of {patches.resolve()}"
        if max_turns is None:  # two calls a candidate and the DONE answer; a resume's nudges
            max_turns = 2 * len(client.candidates) + 5
    elif planner == "model":
        if patches is not None:
            fail("--patches is for --planner patches", "add --planner patches (no model, no key)", 2)
        profile, client = _model(lab, model, base_url)
    else:
        fail(f"--planner must be 'model' or 'patches', got {planner!r}",
             "--planner patches --patches DIR runs without an API key", 2)
    if goal is None and resume is None:
        goal = overnight.default_goal()

    def started(sid: str, chain: list[str]) -> None:
        err.print(f"[dim]labwarden loop: session {sid}" + (f", resuming {chain[0]}" if chain else "")
                  + "[/dim]")

    turns = max_turns if max_turns is not None else overnight.turns_for(budget_usd, model)
    limits = Limits(budget_usd=budget_usd, until=deadline, max_turns=turns)
    try:
        res = asyncio.run(overnight.run_loop(
            profile, client, goal=goal, limits=limits, out_dir=out_dir, resume=resume,
            hooks=printing_hooks(err, client.totals), progress=progress_printer(err), on_start=started,
            auto_resume=not fresh,
            calibration=calibrated.CalibrationPolicy(max_age_h=calibration_max_age,
                                                     skip=skip_calibration)))
    except LabError as exc:  # the API stayed unreachable, the DUT did not answer, no such session
        fail_on(exc)
    out.print(f"stopped: {res.outcome.stop} -- {res.outcome.detail}\nsession: {res.session_id}\n"
              f"summary: {res.summary}\nreport:  {res.report}", markup=False, highlight=False, soft_wrap=True)
    if res.outcome.stop == "api_unavailable":
        raise typer.Exit(1)
