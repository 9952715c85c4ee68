"""`labwarden call TOOL '{json args}' --lab lab.toml [--json]`: one subcommand per registered
tool, generated from its spec (no hand-written argument lists); `--help` shows the schema."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from labwarden.cli.common import DEFAULT_LAB, LabOpt, load_profile
from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError
from labwarden.core.spec import ToolSpec
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools import registry

call_app = typer.Typer(help="Call one lab tool with JSON arguments (see `labwarden call TOOL --help`).",
                       no_args_is_help=True, rich_markup_mode=None)
err = Console(stderr=True)
out = Console()



def schema_help(spec: ToolSpec) -> str:
    """Human-readable input/output schema for --help (generated, so it cannot drift)."""
    lines = [spec.description, "", f"Effect: {spec.effect}; requires: "
             f"{', '.join(sorted(spec.requires)) or 'nothing'}.", "", "Arguments (JSON object):"]
    schema = spec.input.model_json_schema()
    props = schema.get("properties", {})
    if not props:
        lines.append("  (none: pass '{}')")
    for name, prop in props.items():
        kind = prop.get("type") or " | ".join(a.get("type", "?") for a in prop.get("anyOf", []))
        extra = []
        if "default" in prop:
            extra.append(f"default {json.dumps(prop['default'])}")
        if "examples" in prop:
            extra.append(f"e.g. {json.dumps(prop['examples'][0])}")
        req = " (required)" if name in schema.get("required", []) else ""
        lines.append(f"  {name}: {kind}{req} -- {prop.get('description', '')} "
                     f"{'; '.join(extra)}".rstrip())
    outs = spec.output.model_json_schema().get("properties", {})
    lines += ["", "Result fields: " + ", ".join(outs)]
    return "\n".join(lines)


def _render(record: ToolCallRecord, as_json: bool) -> None:
    if as_json:
        out.print_json(record.model_dump_json())
    elif record.ok:
        out.print_json(json.dumps(record.result))
    if not record.ok and record.error is not None:
        err.print(f"[red]{record.tool} failed ({record.error.kind}):[/red] {escape(record.error.message)}")
        for line in record.error.lines:
            err.print(f"  {line}", markup=False, highlight=False)
        if record.error.remedy:
            err.print(f"[yellow]remedy:[/yellow] {escape(record.error.remedy)}")


async def _call(profile: LabProfile, name: str, args: dict[str, Any]) -> ToolCallRecord:
    async def progress(done: float, total: float | None, message: str) -> None:
        err.print(f"[dim]{name}: {message}[/dim]")

    async with open_lab(profile, progress=progress) as ctx:
        return await call_tool(ctx, name, args)


def _make(spec: ToolSpec):  # type: ignore[no-untyped-def]
    def command(
        args: Annotated[str, typer.Argument(help="JSON object of arguments")] = "{}",
        lab: LabOpt = DEFAULT_LAB,
        as_json: Annotated[bool, typer.Option("--json", help="print the whole call record")] = False,
    ) -> None:
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError as exc:
            err.print(f"[red]error:[/red] arguments are not JSON: {exc}; e.g. '{{}}'")
            raise typer.Exit(2) from None
        if not isinstance(parsed, dict):
            err.print("[red]error:[/red] arguments must be a JSON object, e.g. '{\"stations\": 18}'")
            raise typer.Exit(2)
        profile = load_profile(lab, err)
        try:
            record = asyncio.run(_call(profile, spec.name, parsed))
        except LabError as exc:  # unreachable DUT, wrong host key, a labgrid place held by someone
            err.print(f"[red]error:[/red] {escape(exc.problem)}")
            err.print(f"[yellow]remedy:[/yellow] {escape(exc.remedy)}")
            raise typer.Exit(1) from None
        _render(record, as_json)
        if not record.ok:
            raise typer.Exit(2 if record.error and record.error.kind == "invalid_input" else 1)

    command.__doc__ = schema_help(spec)
    return command


for _spec in registry.TOOLS.values():
    call_app.command(_spec.name, help=schema_help(_spec))(_make(_spec))
