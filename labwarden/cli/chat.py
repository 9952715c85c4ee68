"""`labwarden chat --lab lab.toml`: a terminal conversation with a Claude model that has the lab's
tools, in-process (guarded and logged like every other door). Text streams as it is generated;
each tool call shows its progress and outcome; a running line shows tokens and dollars."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated

import typer
from rich.console import Console

from labwarden.agent.loop import CONFIG, Agent, Limits, Outcome
from labwarden.agent.model import Model, ModelOptions, ModelUnavailable
from labwarden.cli import agentopts as options
from labwarden.cli.agentopts import BaseUrlOpt, BudgetOpt, LabOpt, MaxTurnsOpt, ModelOpt
from labwarden.lab.config import LabProfile
from labwarden.server.prompts import load, prompt_dir
from labwarden.tools.context import open_lab

console = Console()
QUIT = {"/quit", "/exit", "exit", "quit"}


def system_prompt(question: str | None) -> str:
    return load(prompt_dir() / "hunt-a-hotspot.md").render(question=question)


async def _lines(given: list[str], read: Callable[[str], str]) -> AsyncIterator[str]:
    if given:
        for text in given:
            console.print(f"[bold]you>[/bold] {text}", markup=True, highlight=False)
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


async def run_chat(profile: LabProfile, opts: ModelOptions, *, limits: Limits, question: str | None,
                   messages: list[str], read: Callable[[str], str] = input) -> Outcome | None:
    """Talk until the input ends (or a budget stops it); returns the last outcome."""
    model = Model(opts)
    hooks = options.printing_hooks(console, model.totals, stream_text=True)
    outcome = None
    try:
        async with open_lab(profile, progress=options.progress_printer(console), client="chat") as ctx:
            agent = Agent(ctx, model, system_prompt(question), hooks=hooks)
            agent.note(CONFIG, {"mode": "chat", "model": opts.model, "question": question,
                                "budget_usd": limits.budget_usd})
            console.print(f"[dim]labwarden chat: session {ctx.session_id}, model {opts.model}; "
                          "/quit or end of input to leave[/dim]", soft_wrap=True)
            async for text in _lines(messages, read):
                outcome = await agent.send(text, limits)
                if outcome.stop not in ("waiting", "done"):
                    console.print(f"[yellow]stopped ({outcome.stop}): {outcome.detail}[/yellow]")
                    if outcome.stop in ("budget", "api_unavailable"):
                        break
            console.print(f"[dim]session {ctx.session_id}: {model.totals.calls} model calls, "
                          f"{model.totals.line()}[/dim]", soft_wrap=True)
    finally:
        await model.close()
    return outcome


def chat(lab: LabOpt = options.DEFAULT_LAB, model: ModelOpt = options.DEFAULT_MODEL,
         base_url: BaseUrlOpt = None, budget_usd: BudgetOpt = None, max_turns: MaxTurnsOpt = 30,
         message: Annotated[list[str] | None, typer.Option(
             "--message", "-m", help="send this instead of reading stdin; repeatable")] = None,
         question: Annotated[str | None, typer.Option(
             help="the question of the hunt-a-hotspot system prompt")] = None) -> None:
    """Talk to a Claude model that has the lab's tools (ANTHROPIC_API_KEY; every call logged and priced)."""
    profile, opts = options.load(console, lab, model, base_url)
    from labwarden.lab.dut.errors import DeviceError

    try:
        limits = Limits(budget_usd=budget_usd, max_turns=max_turns)
        outcome = asyncio.run(run_chat(profile, opts, limits=limits, question=question,
                                       messages=message or []))
    except ModelUnavailable as exc:
        options.fail(console, exc.problem, exc.remedy)
    except DeviceError as exc:
        options.fail(console, exc.problem, exc.remedy)
    if outcome is not None and outcome.stop in ("budget", "api_unavailable"):
        raise typer.Exit(1)
