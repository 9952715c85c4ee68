"""`labwarden vlab ...`: bring the virtual lab up and down, hold stations, reboot it, measure
its CPU curve, and show its state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from labwarden.cli.bringup import PatchOpt, PlacesOpt, PortOpt, show_fleet, show_up
from labwarden.cli.common import JsonOpt, err, fail, fail_on, out
from labwarden.core.errors import LabError
from labwarden.lab.fleetdir import FleetDir
from labwarden.vlab import control, curve, fleet

app = typer.Typer(help="The virtual lab: a DUT of real processes, perf and SSH on loopback.",
                  no_args_is_help=True)

DEFAULT_VLAB_DIR = Path(".vlab")
DirOpt = Annotated[Path, typer.Option("--dir", help="vlab state directory")]
DensitiesOpt = Annotated[str, typer.Option(help="comma-separated station counts")]


@app.command("up")
def vlab_up(
    dir: DirOpt = DEFAULT_VLAB_DIR,
    port: PortOpt = 0,
    patch: PatchOpt = None,
    places: PlacesOpt = 0,
) -> None:
    """Create the state dir, build and flash the firmware, start the DUT and its SSH endpoint,
    and write lab.toml (the lab profile every other command takes with --lab).
    With --places N: N DUTs (DIR/vlab-0 ...), each pinned to a CPU of its own, as the places of a
    labgrid coordinator and exporter started on 127.0.0.1, and DIR/lab.toml the fleet's profile."""
    if places:
        if port:
            fail("--port and --places: a fleet's DUTs take free ports", "drop --port", code=2)
        _fleet_up(dir, places, patch or [])
        return
    try:
        with err.status("vlab up") as st:
            info = control.up(dir, port=port, patches=patch or [],
                              progress=lambda msg: st.update(f"vlab up: {msg}"))
    except control.VlabError as exc:
        fail_on(exc)
    for note in info.notes:
        err.print(f"[yellow]note:[/yellow] {escape(note)}")
    show_up("vlab", dir, [
        ("state dir", info.root),
        ("ssh", f"{info.ssh} (user root, key {info.client_key})"),
        ("lab profile", info.lab_toml),
        ("firmware", f"git {info.git_hash[:12]}, build {info.build_id}"),
        ("processes", ", ".join(f"{k} {v}" for k, v in info.pids.items())),
    ], f"labwarden vlab associate 114 --dir {dir}")


def _fleet_up(dir: Path, places: int, patches: list[str]) -> None:
    try:
        with err.status("vlab up") as st:
            info = fleet.up(dir, places, patches, progress=lambda msg: st.update(f"vlab up: {msg}"))
    except LabError as exc:
        fail_on(exc)
    for note in info.notes:
        err.print(f"[yellow]note:[/yellow] {escape(note)}")
    show_up("vlab", dir, [
        ("fleet", info.root),
        ("coordinator", f"{info.coordinator} (labgrid; `labgrid-client -x {info.coordinator} places`)"),
        *((f"place {name}", f"{v.root} (ssh {v.ssh})") for name, v in info.places.items()),
        ("lab profile", info.lab_toml),
    ], f"labwarden lab health --lab {info.lab_toml}")


@app.command("status")
def vlab_status(dir: DirOpt = DEFAULT_VLAB_DIR,
                json_out: JsonOpt = False) -> None:
    """Show whether the vlab is up, its processes, running firmware, stations and tuning (for a
    fleet: each place's DUT and the coordinator)."""
    if FleetDir.at(dir).is_fleet():
        _fleet_status(dir, json_out)
        return
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


def _fleet_status(dir: Path, json_out: bool) -> None:
    fst = fleet.status(dir)
    show_fleet(fst, {name: f"{st.root}: " + (
        f"up, ssh 127.0.0.1:{st.ssh_port}, running {st.running_version or '?'}" if st.up else "DOWN")
        for name, st in fst.places.items()}, json_out)


@app.command("associate")
def vlab_associate(stations: Annotated[int, typer.Argument(help="clients to hold; 0 = none")],
                   dir: DirOpt = DEFAULT_VLAB_DIR) -> None:
    """Hold N stations (round-robin over the enabled radios) through the station simulator."""
    try:
        counts = control.associate(dir, stations)
    except control.VlabError as exc:
        fail_on(exc)
    out.print(" ".join(f"{k}={v}" for k, v in counts.items()))


@app.command("reboot")
def vlab_reboot(dir: DirOpt = DEFAULT_VLAB_DIR) -> None:
    """Restart every DUT process and apply reboot drift (scaling VAPs off, channels auto,
    governor schedutil, boost on, trace zones back to factory)."""
    try:
        st = control.reboot(dir)
    except control.VlabError as exc:
        fail_on(exc)
    out.print(f"rebooted: services {st.services}")


def _curve_table(points: list[curve.CurvePoint], title: str) -> Table:
    table = Table("stations", "stad CPU % (mean)", "stdev", "samples", title=title)
    for p in points:
        table.add_row(str(p.stations), f"{p.cpu_mean:.1f}", f"{p.cpu_stdev:.2f}",
                      " ".join(f"{s:.1f}" for s in p.samples))
    return table


@app.command("curve")
def vlab_curve(dir: DirOpt = DEFAULT_VLAB_DIR, densities: DensitiesOpt = "18,60,114",
               reps: int = 3, window: Annotated[float, typer.Option(help="seconds")] = 5.0) -> None:
    """Measure stad CPU% at each station density on a running vlab (from /proc, CLK_TCK)."""
    try:
        dens = [int(d) for d in densities.split(",") if d.strip()]
    except ValueError:
        fail(f"--densities must be integers like 18,60,114, got {densities!r}",
             "e.g. --densities 18,60,114", 2)
    try:
        with err.status("measuring") as st:
            points = curve.measure_curve(str(dir), dens, reps=reps, window_s=window,
                                         progress=lambda m: st.update(m))
    except control.VlabError as exc:
        fail_on(exc)
    out.print(_curve_table(points, "stad CPU vs associated stations"))


@app.command("down")
def vlab_down(dir: DirOpt = DEFAULT_VLAB_DIR) -> None:
    """Stop everything the vlab started; nothing is left running. For a fleet (up --places):
    its coordinator and exporter (with its places and reservations) and every DUT."""
    stopped = fleet.down(dir) if FleetDir.at(dir).is_fleet() else control.down(dir)
    out.print(f"vlab down: stopped {len(stopped)} process(es)")
