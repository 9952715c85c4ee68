"""Replay a session in the terminal: a rich timeline of every call, decision, artifact and cost;
a tool's nested calls indented under it."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from labwarden.transcripts.timeline import Timeline

STATUS_STYLE = {"ok": "green", "allow": "green", "refuse": "red", "heal": "yellow"}


def _status(s: str) -> Text:
    style = STATUS_STYLE.get(s, "red" if s.startswith("error") else "")
    return Text(s, style=style)


def render(tl: Timeline) -> RenderableType:
    """The timeline as rich renderables (dynamic text is never read as markup)."""
    head = Table.grid(padding=(0, 2))
    head.add_row(Text("session", style="bold"), Text(tl.session_id))
    for k, v in tl.header.items():
        head.add_row(Text(k, style="bold"), Text(v))
    table = Table("seq", "t+s", "kind", "what", "status", "dur s", "tokens", "$", "detail / artifacts",
                  title="timeline", expand=False)
    for r in tl.rows:
        detail = Text(r.detail)
        for a in r.artifacts:
            detail.append(f"\n  artifact: {a}", style="cyan")
        what = Text(("  " * (r.depth - 1) + "└ ") if r.depth else "") + Text(r.what)
        table.add_row(str(r.seq), f"{r.offset_s:.1f}", Text(r.kind), what, _status(r.status),
                      "" if r.duration_s is None else f"{r.duration_s:.2f}", Text(r.tokens),
                      "" if r.cost_usd is None else f"{r.cost_usd:.4f}", detail)
    t = tl.totals
    totals = Table("total", "value", title="totals", show_header=False)
    totals.add_row("events", str(t.events))
    totals.add_row("tool calls", f"{t.tool_calls} ({t.nested_calls} nested, {t.tool_errors} failed), "
                   f"{t.tool_seconds:.1f} s")
    totals.add_row("tool results read (est.)", f"~{t.result_tokens_est} tokens")
    totals.add_row("guard decisions", Text(", ".join(f"{k} {v}" for k, v in sorted(t.guard.items())) or "-"))
    totals.add_row("model calls", str(t.model_calls))
    totals.add_row("model tokens", ", ".join(f"{k} {v}" for k, v in t.tokens.items()))
    totals.add_row("cost", f"${t.cost_usd:.4f}")
    return Group(head, table, totals)
