"""`labwarden lab ...`: what a person does to the lab outside any agent session (board health;
on a fleet's profile, every place's health)."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from labwarden.cli.common import (
    DEFAULT_LAB,
    JsonOpt,
    LabOpt,
    err,
    fail,
    fail_on,
    load_profile,
    out,
)
from labwarden.core.errors import LabError
from labwarden.core.placehealth import NotBad
from labwarden.lab.boardstate import BoardState
from labwarden.runtime import placeadmin
from labwarden.runtime.fleet import is_fleet

app = typer.Typer(help="Lab administration by a person: check a profile and its DUT, write a "
                  "starting profile, the profile's schema, board health, a fleet's place health.",
                  no_args_is_help=True)
PlaceOpt = Annotated[str | None, typer.Option("--place", help="on a fleet's profile: the place "
                                              "to clear (`lab health` lists them)")]


def _board_line(state: BoardState) -> str:
    return (f"{state.board_health}" + (f" ({escape(state.health_reason)})" if state.health_reason
                                       else "")
            + f"; flashed: {state.flashed_build}  verified: {state.verified_build}")


@app.command("health")
def health(lab: LabOpt = DEFAULT_LAB) -> None:
    """Show the board's health (good / unknown / bad), why, and what was flashed and verified;
    on a fleet's profile, every place's health (and since when, who cleared it) and board."""
    profile = load_profile(lab)
    if not is_fleet(profile):
        state = BoardState.load(profile.data_dir())
        out.print(f"board: {state.board_health}" + (f" ({escape(state.health_reason)})"
                                                     if state.health_reason else ""))
        out.print(f"flashed: {state.flashed_build}  verified: {state.verified_build}")
        return
    fleet = asyncio.run(placeadmin.fleet_health(profile))
    if fleet.note:
        out.print(f"[yellow]note:[/yellow] {escape(fleet.note)}")
    for row in fleet.places:
        h = row.health
        head = (f"{row.place}: {h.state} since {h.since:%Y-%m-%d %H:%M:%S} UTC"
                + (f" ({escape(h.reason)})" if h.reason else "") if h is not None
                else f"{row.place}: unknown (no record yet: not judged by a loop here)")
        out.print(head + ("" if row.listed else "  [not in the fleet now]"), soft_wrap=True)
        out.print(f"  board: {_board_line(row.board)}", soft_wrap=True)
    if not fleet.places:
        out.print("no places: the profile names none and the data dir knows none")


@app.command("clear-bad")
def clear_bad(lab: LabOpt = DEFAULT_LAB,
              reason: Annotated[str, typer.Option(help="what the person checked or fixed")] = "",
              place: PlaceOpt = None) -> None:
    """Clear a `bad` board after a person has inspected it. The board becomes `unknown`: a
    health check (flash a known image, then fingerprint_verify) still has to prove it. On a
    fleet's profile, `--place NAME` clears that place; the loop's next lease of it runs the
    health check first."""
    profile = load_profile(lab)
    if is_fleet(profile):
        if place is None:
            fail(f"{lab} is a fleet's profile: --place is required (which place to clear)",
                 f"`labwarden lab health --lab {lab}` lists the places and their health; "
                 "then `labwarden lab clear-bad --lab ... --place NAME`", 2)
        try:
            cleared = asyncio.run(placeadmin.clear_place(profile, place, getpass.getuser(), reason))
        except NotBad as exc:
            out.print(f"{escape(str(exc))}: nothing to clear")
            raise typer.Exit(1) from None
        except LabError as exc:
            fail_on(exc, 2)
        out.print(f"{place}: unknown ({escape(cleared.reason or '')})", soft_wrap=True)
        return
    if place is not None:
        fail(f"--place {place}: {lab} is a single board's profile, not a fleet's "
             "([dut.labgrid] places, place_match or place_tags)",
             "drop --place to clear this board, or pass the fleet's profile to --lab", 2)
    data_dir = profile.data_dir()
    state = BoardState.load(data_dir)
    if state.board_health != "bad":
        out.print(f"board is {state.board_health}, not bad: nothing to clear")
        raise typer.Exit(1)
    state.board_health = "unknown"
    state.health_reason = f"cleared by {getpass.getuser()}" + (f": {reason}" if reason else "") \
        + "; run a health check"
    state.save(data_dir)
    out.print(f"board: unknown ({escape(state.health_reason)})")


@app.command("schema")
def schema(out_file: Annotated[Path | None, typer.Option(
        "--out", help="write the schema to this file (default: print it)")] = None) -> None:
    """Print (or write) the JSON Schema of lab.toml, generated from the profile's model: for an
    editor (taplo, Even Better TOML) to complete and check a profile as it is written."""
    from labwarden.lab.schema import schema_text

    text = schema_text()
    if out_file is None:
        typer.echo(text, nl=False)
        return
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(text)
    err.print(f"wrote {out_file}")


@app.command("check")
def check(profile: Annotated[Path, typer.Argument(help="the lab profile (TOML) to check")],
          json_out: JsonOpt = False,
          skip_build: Annotated[bool, typer.Option("--skip-build", help="do not run the build "
                                                   "command (it is a real, confined build)")] = False,
          fresh_build: Annotated[bool, typer.Option("--fresh-build", help="run the build command "
                                                    "even when this commit and recipe were built "
                                                    "before (in a scratch dir, removed after)")
                                 ] = False,
          ) -> None:
    """Check a lab profile and the lab it describes, one row per check with its remedy: the
    schema (every invalid key), then the DUT -- SSH and its host key, the shell, perf,
    tracefs/uprobes (when declared), the target running, `--version` (when [target]
    prints_git_hash), the flash path (not run) -- then the build command, confined, and [build]
    artifacts in its output. Exit code 0 when every row is ok or skipped, 1 on a problem."""
    from labwarden.runtime import labcheck as checks

    report = asyncio.run(checks.check(profile, build=not skip_build, fresh=fresh_build))
    if json_out:
        out.print_json(report.model_dump_json())
    else:
        table = Table("check", "state", "detail", "remedy")
        colour = {"ok": "green", "problem": "red", "skipped": "yellow"}
        for row in report.rows:
            detail = escape(row.detail) + "".join(f"\n  {escape(ln)}" for ln in row.lines)
            table.add_row(row.check, f"[{colour[row.status]}]{row.status}[/{colour[row.status]}]",
                          detail, escape(row.remedy or ""))
        out.print(table)
        n = len(report.problems())
        out.print("every check passed" if report.ok else f"{n} problem(s): see each remedy")
    raise typer.Exit(0 if report.ok else 1)


@app.command("init")
def init(ssh: Annotated[str, typer.Option("--ssh", help="the DUT's SSH address: USER@HOST[:PORT]")],
         repo: Annotated[Path, typer.Option("--repo", help="the firmware's git repository")],
         out_file: Annotated[Path, typer.Option("--out", help="where to write the profile")
                             ] = Path("lab.toml"),
         key: Annotated[Path | None, typer.Option("--key", help="private key the DUT accepts "
                                                  "(default: ~/.ssh/id_ed25519, id_ecdsa or "
                                                  "id_rsa; the ssh agent is not used)")] = None,
         target: Annotated[str | None, typer.Option("--target", help="the process to measure "
                                                    "(default: guessed, the busiest)")] = None,
         force: Annotated[bool, typer.Option("--force", help="overwrite --out")] = False,
         json_out: JsonOpt = False) -> None:
    """Write a starting lab profile by probing the DUT over SSH (its host key, pinned on first
    use; the shell, busybox, perf, tracefs, sysupgrade; the processes that could be the target)
    and the repo (a build command from its Makefile). Every guessed value is commented as a
    guess; the profile validates. Then run `labwarden lab check` on it."""
    from labwarden.runtime import labinit

    try:
        result = asyncio.run(labinit.init(ssh, repo, out_file, key=key, target=target, force=force))
    except LabError as exc:
        fail_on(exc, 1)
    if json_out:
        out.print_json(result.model_dump_json())
        return
    out.print(f"wrote {escape(result.path)} (target: {escape(result.target)})", soft_wrap=True)
    for guess in result.guesses:
        out.print(f"  guessed: {escape(guess)}", soft_wrap=True)
    out.print(f"next: labwarden lab check {escape(result.path)}", soft_wrap=True)
