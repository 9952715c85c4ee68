"""Options and rendering shared by `labwarden chat` and `labwarden loop`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from labwarden.agent.loop import Hooks
from labwarden.agent.model import DEFAULT_MODEL, ModelOptions, Totals, check_priced
from labwarden.cli.common import DEFAULT_LAB, LabOpt, load_profile
from labwarden.core.call import ToolCallRecord
from labwarden.lab.config import LabProfile
from labwarden.transcripts.pricing import UnknownModel

ModelOpt = Annotated[str, typer.Option("--model", help="model id (must be in the price table)")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", help="Messages API base URL (default: ANTHROPIC_BASE_URL, else Anthropic's)")]
BudgetOpt = Annotated[float | None, typer.Option(
    "--budget-usd", help="stop before a model call once this many dollars are spent")]
MaxTurnsOpt = Annotated[int, typer.Option("--max-turns", help="model calls per request: a safety cap")]

__all__ = ["DEFAULT_LAB", "DEFAULT_MODEL", "BaseUrlOpt", "BudgetOpt", "LabOpt", "MaxTurnsOpt", "ModelOpt"]


def fail(console: Console, problem: str, remedy: str, code: int = 1) -> NoReturn:
    console.print(f"[red]error:[/red] {escape(problem)}")
    console.print(f"[yellow]remedy:[/yellow] {escape(remedy)}")
    raise typer.Exit(code)


def load(console: Console, lab: Path, model: str, base_url: str | None) -> tuple[LabProfile, ModelOptions]:
    profile = load_profile(lab, console)
    try:
        check_priced(model)
    except UnknownModel as exc:
        fail(console, str(exc), "pick a priced model with --model, or add it to the price table", 2)
    return profile, ModelOptions(model=model, base_url=base_url)


def tool_line(record: ToolCallRecord) -> str:
    if record.ok:
        return f"[green]✓[/green] {record.tool} ({record.duration_s:.1f} s)"
    e = record.error
    assert e is not None
    what = f"{e.code or e.kind}: {e.message}" + (f" -- remedy: {e.remedy}" if e.remedy else "")
    return f"[red]✗[/red] {record.tool} {escape(what)}"


def printing_hooks(console: Console, totals: Totals, *, stream_text: bool) -> Hooks:
    """Show streamed text, each tool call with its progress (printed live by open_lab's progress
    sink) and its outcome, and the running token/cost line after every model call."""
    state = {"midline": False}

    def on_text(delta: str) -> None:
        if stream_text:
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


def progress_printer(console: Console):  # type: ignore[no-untyped-def]
    async def progress(done: float, total: float | None, message: str) -> None:
        console.print(f"  [dim]· {escape(message)}[/dim]", soft_wrap=True)
    return progress
