"""`labwarden ...`: a thin door onto the Python API (parse, call one function, render)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from labwarden import __version__, doctor
from labwarden.agent.overnight import loop
from labwarden.cli.call import call_app
from labwarden.cli.chat import chat
from labwarden.cli.lab import lab_app
from labwarden.cli.run import run_cmd
from labwarden.cli.serve import serve
from labwarden.cli.transcripts import transcripts_app
from labwarden.vlab import control, curve

app = typer.Typer(help="labwarden: run a performance lab through guarded, audited tools.",
                  no_args_is_help=True)
vlab_app = typer.Typer(help="The virtual lab: a DUT of real processes, perf and SSH on loopback.",
                       no_args_is_help=True)
app.add_typer(vlab_app, name="vlab")
app.add_typer(call_app, name="call")
app.add_typer(lab_app, name="lab")
app.command("serve")(serve)
app.command("run")(run_cmd)
app.add_typer(transcripts_app, name="transcripts")
app.command("chat")(chat)
app.command("loop")(loop)
console = Console(stderr=True)
out = Console()

DEFAULT_VLAB_DIR = Path(".vlab")
DirOpt = Annotated[Path, typer.Option("--dir", help="vlab state directory")]


def _fail(exc: control.VlabError) -> None:
    console.print(f"[red]error:[/red] {escape(exc.problem)}")
    console.print(f"[yellow]remedy:[/yellow] {escape(exc.remedy)}")
    raise typer.Exit(1)


@app.command("version")
def version() -> None:
    """Print labwarden's version."""
    out.print(__version__)


@app.command("doctor")
def doctor_cmd(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Check perf, perf_event_paranoid, tracefs/uprobes, inferno, cargo, gcc; name each remedy.

    Exit code 0 when everything is ready, 2 when something is missing (the vlab still runs
    without root; what needs root is listed)."""
    results = doctor.checks()
    if json_out:
        out.print_json(json.dumps([c.model_dump() for c in results]))
    else:
        table = Table("check", "state", "detail", "needed for", "remedy")
        for c in results:
            table.add_row(c.name, "[green]ok[/green]" if c.ok else "[red]missing[/red]",
                          c.detail, c.needed_for, c.remedy or "")
        out.print(table)
    raise typer.Exit(0 if all(c.ok for c in results) else 2)


@vlab_app.command("up")
def vlab_up(
    dir: DirOpt = DEFAULT_VLAB_DIR,
    port: Annotated[int, typer.Option(help="SSH port on 127.0.0.1 (0 = a free one)")] = 0,
    patch: Annotated[list[str] | None, typer.Option(
        help="build with this patch (id like 0901, or a path); repeatable")] = None,
) -> None:
    """Create the state dir, build and flash the firmware, start the DUT and its SSH endpoint,
    and write lab.toml (the lab profile every other command takes with --lab)."""
    try:
        with console.status("vlab up") as st:
            info = control.up(dir, port=port, patches=patch or [],
                              progress=lambda msg: st.update(f"vlab up: {msg}"))
    except control.VlabError as exc:
        _fail(exc)
        return
    for note in info.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    table = Table("what", "where", show_header=False)
    table.add_row("state dir", info.root)
    table.add_row("ssh", f"{info.ssh} (user root, key {info.client_key})")
    table.add_row("lab profile", info.lab_toml)
    table.add_row("firmware", f"git {info.git_hash[:12]}, build {info.build_id}")
    table.add_row("processes", ", ".join(f"{k} {v}" for k, v in info.pids.items()))
    out.print(table)
    out.print(f"next: labwarden vlab associate 114 --dir {dir}   |   labwarden vlab down --dir {dir}")


@vlab_app.command("status")
def vlab_status(dir: DirOpt = DEFAULT_VLAB_DIR,
                json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show whether the vlab is up, its processes, running firmware, stations and tuning."""
    st = control.status(dir)
    if json_out:
        out.print_json(st.model_dump_json())
        return
    if not st.up:
        out.print(f"vlab in {st.root}: [red]down[/red]  (start it: labwarden vlab up --dir {dir})")
        raise typer.Exit(1)
    table = Table("what", "value", show_header=False)
    table.add_row("ssh", f"127.0.0.1:{st.ssh_port} (dutd pid {st.dutd_pid})")
    table.add_row("services", ", ".join(f"{k} {v or 'DOWN'}" for k, v in st.services.items()))
    table.add_row("running", st.running_version or "?")
    table.add_row("associated", json.dumps(st.associated))
    if st.state:
        table.add_row("governor / boost", f"{','.join(sorted(set(st.state.governors)))} / "
                      f"{'on' if st.state.boost else 'off'}")
        table.add_row("VAPs enabled", " ".join(st.state.vaps_enabled))
        table.add_row("channels", " ".join(f"{k}={v}" for k, v in st.state.channels.items()))
        hot = sorted({lvl for lvl in st.state.trace_levels.values()})
        table.add_row("trace zone levels", " ".join(map(str, hot)))
        table.add_row("stamon rpc", st.state.stamon_rpc)
    out.print(table)


@vlab_app.command("associate")
def vlab_associate(stations: Annotated[int, typer.Argument(help="clients to hold; 0 = none")],
                   dir: DirOpt = DEFAULT_VLAB_DIR) -> None:
    """Hold N stations (round-robin over the enabled radios) through the station simulator."""
    try:
        counts = control.associate(dir, stations)
    except control.VlabError as exc:
        _fail(exc)
        return
    out.print(" ".join(f"{k}={v}" for k, v in counts.items()))


@vlab_app.command("reboot")
def vlab_reboot(dir: DirOpt = DEFAULT_VLAB_DIR) -> None:
    """Restart every DUT process and apply reboot drift (scaling VAPs off, channels auto,
    governor schedutil, boost on, trace zones back to factory)."""
    try:
        st = control.reboot(dir)
    except control.VlabError as exc:
        _fail(exc)
        return
    out.print(f"rebooted: services {st.services}")


def _curve_table(points: list[curve.CurvePoint], title: str) -> Table:
    table = Table("stations", "stad CPU % (mean)", "stdev", "samples", title=title)
    for p in points:
        table.add_row(str(p.stations), f"{p.cpu_mean:.1f}", f"{p.cpu_stdev:.2f}",
                      " ".join(f"{s:.1f}" for s in p.samples))
    return table


DensitiesOpt = Annotated[str, typer.Option(help="comma-separated station counts")]


@vlab_app.command("curve")
def vlab_curve(dir: DirOpt = DEFAULT_VLAB_DIR, densities: DensitiesOpt = "18,60,114",
               reps: int = 3, window: Annotated[float, typer.Option(help="seconds")] = 5.0) -> None:
    """Measure stad CPU% at each station density on a running vlab (from /proc, CLK_TCK)."""
    try:
        dens = [int(d) for d in densities.split(",") if d.strip()]
    except ValueError:
        console.print(f"[red]error:[/red] --densities must be integers like 18,60,114, got {densities!r}")
        raise typer.Exit(2) from None
    try:
        with console.status("measuring") as st:
            points = curve.measure_curve(str(dir), dens, reps=reps, window_s=window,
                                         progress=lambda m: st.update(m))
    except control.VlabError as exc:
        _fail(exc)
        return
    out.print(_curve_table(points, "stad CPU vs associated stations"))


PLAYBOOK = Path(__file__).resolve().parent.parent / "playbooks" / "vlab-hotspot.toml"


@app.command("demo")
def demo(dir: DirOpt = DEFAULT_VLAB_DIR / "demo",
         playbook: Annotated[Path, typer.Option(help="the story to run")] = PLAYBOOK,
         window: Annotated[float, typer.Option(help="seconds per measurement window")] = 4.0,
         reps: int = 3) -> None:
    """Tell seed 000's story on the virtual lab: bring it up, run the vlab-hotspot playbook
    (baseline, flame graph, attribution, trace fix, 0901, 0902, 0905 refuted, gates), print the
    summary and the report path, and bring it down."""
    import asyncio

    from labwarden.cli.run import execute, summary
    from labwarden.lab.config import LabProfile
    from labwarden.playbook import model

    book = model.load(playbook, {"window_s": window, "reps": reps})
    try:
        with console.status("vlab up") as st:
            control.down(dir)
            info = control.up(dir, progress=lambda m: st.update(f"vlab up: {m}"))
        out.print(f"vlab up: firmware {info.git_hash[:12]}, ssh {info.ssh}, profile {info.lab_toml}")
        rec = asyncio.run(execute(LabProfile.from_file(info.lab_toml), book))
    except control.VlabError as exc:
        _fail(exc)
        return
    finally:
        stopped = control.down(dir)
        console.print(f"vlab down: stopped {len(stopped)} process(es)")
    for table in summary(rec):
        out.print(table)
    report = next((s for s in rec.steps if s.tool == "report" and s.record.ok), None)
    if report:
        out.print(f"report: {report.record.result['path']}")  # type: ignore[index]
    db = Path(info.lab_toml).parent / "data" / "transcripts.db"
    out.print(f"{len(rec.steps)} steps in {rec.duration_s:.0f} s; replay it: labwarden transcripts "
              f"replay {rec.session_id} --db {db}")
    if not rec.ok:
        raise typer.Exit(1)


@vlab_app.command("down")
def vlab_down(dir: DirOpt = DEFAULT_VLAB_DIR) -> None:
    """Stop everything the vlab started; nothing is left running."""
    stopped = control.down(dir)
    out.print(f"vlab down: stopped {len(stopped)} process(es)")


if __name__ == "__main__":
    app()
