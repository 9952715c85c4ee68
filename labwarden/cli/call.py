"""`labwarden call TOOL '{json args}' --lab lab.toml [--json]`: one subcommand per registered
tool, generated from its spec (no hand-written argument lists); `--help` shows the schema.

The subcommands are looked up in the registry when the command line is parsed, not when this
module is imported: a tool registered later (a plugin, a test) has its door too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperGroup

from labwarden.cli.common import (
    DEFAULT_LAB,
    LabOpt,
    call_once,
    fail,
    fail_call,
    fail_on,
    load_profile,
    log_malformed,
    out,
)
from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError
from labwarden.core.nesting import clip_text
from labwarden.core.spec import ToolSpec
from labwarden.tools import registry

if TYPE_CHECKING:  # typer 0.2x vendors click: these are its classes (the click package is not imported)
    from typer import _click as click


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
    if not record.ok:
        fail_call(record, 2 if record.error and record.error.kind == "invalid_input" else 1)


def _door(name: str) -> Callable[..., None]:
    def command(
        args: Annotated[str, typer.Argument(help="JSON object of arguments")] = "{}",
        lab: LabOpt = DEFAULT_LAB,
        as_json: Annotated[bool, typer.Option("--json", help="print the whole call record")] = False,
    ) -> None:
        profile = load_profile(lab)
        problem = remedy = None
        try:
            parsed = json.loads(clip_text(args))  # nested too deep: cut, the runner refuses it
        except (json.JSONDecodeError, RecursionError) as exc:
            problem, remedy = f"arguments are not JSON: {exc}", "pass one JSON object, e.g. '{}'"
        else:
            if not isinstance(parsed, dict):
                problem, remedy = "arguments must be a JSON object", "e.g. '{\"stations\": 18}'"
        if problem is not None:  # logged like any refused call (and counted), then reported
            with contextlib.suppress(LabError, OSError):
                asyncio.run(log_malformed(profile, name, args, problem))
            fail(problem, remedy or "", 2)
        try:
            record = asyncio.run(call_once(profile, name, parsed))
        except LabError as exc:  # unreachable DUT, wrong host key, a labgrid place held by someone
            fail_on(exc)
        _render(record, as_json)

    return command


class ToolGroup(TyperGroup):
    """The `call` group: its subcommands are the registry's tools at the moment they are asked
    for (listing, --help, resolving TOOL), each built from the spec alone."""

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        return {name: self._build(spec) for name, spec in registry.TOOLS.items()}

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        """TyperGroup's __init__ stores the statically registered commands: there are none."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(registry.TOOLS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = registry.TOOLS.get(cmd_name)
        return self._build(spec) if spec is not None else None

    def _build(self, spec: ToolSpec) -> click.Command:
        # a one-command Typer yields that command (public API), rendered like its siblings
        one = typer.Typer(rich_markup_mode=self.rich_markup_mode, add_completion=False)
        one.command(spec.name, help=schema_help(spec))(_door(spec.name))
        return typer.main.get_command(one)


app = typer.Typer(cls=ToolGroup, no_args_is_help=True, rich_markup_mode=None,
                  help="Call one lab tool with JSON arguments (see `labwarden call TOOL --help`).")
