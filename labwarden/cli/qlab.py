"""`labwarden qlab ...`: the qlab -- a Debian kernel under QEMU with real 802.11 radios and
clients -- started and stopped through labgrid. Each command calls one function of
labwarden.qlab (control, image)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, cast

import typer
from rich.markup import escape
from rich.table import Table

from labwarden.cli.bringup import PatchOpt, PlacesOpt, PortOpt, show_fleet, show_up
from labwarden.cli.common import JsonOpt, err, fail, fail_on, out
from labwarden.core.errors import LabError
from labwarden.lab.fleetdir import FleetDir
from labwarden.qlab import control, fleet, image

app = typer.Typer(help="The qlab: a real-kernel DUT under QEMU (labgrid), mac80211_hwsim radios, "
                  "hostapd APs, wpa_supplicant clients.", no_args_is_help=True)

DEFAULT_QLAB_DIR = Path(".qlab")
DirOpt = Annotated[Path, typer.Option("--dir", help="qlab state directory")]
AccelOpt = Annotated[str, typer.Option(help="auto (probe KVM, fall back to TCG), kvm or tcg")]


@app.command("image")
def qlab_image(json_out: JsonOpt = False) -> None:
    """Build the guest image from Debian packages if it is not cached (needs root), and show it."""
    try:
        with err.status("qlab image") as st:
            img = image.ensure(lambda m: st.update(f"qlab image: {escape(m)}"))
    except LabError as exc:
        fail_on(exc)
    if json_out:
        out.print_json(img.model_dump_json())
        return
    table = Table("what", "value", show_header=False)
    table.add_row("image", f"{img.key} in {img.dir}")
    table.add_row("kernel", img.kernel_version)
    table.add_row("packages", f"{len(img.packages)} installed: "
                  + ", ".join(f"{p} {v}" for p, v in img.requested.items() if not p.startswith("lib")))
    table.add_row("built in", ", ".join(f"{k} {v:.1f} s" for k, v in img.build_s.items()))
    out.print(table)


@app.command("up")
def qlab_up(
    dir: DirOpt = DEFAULT_QLAB_DIR,
    accel: AccelOpt = "auto",
    memory: Annotated[str, typer.Option(help="guest memory (QEMU -m)")] = "512M",
    clock: Annotated[str | None, typer.Option(
        help="the guest's clock: realtime, icount (1 ns per guest instruction, idle skipped: "
        "CPU% independent of the host's load; one vCPU) or icount:shift=N|auto,sleep=on|off; "
        "default icount on TCG, realtime on KVM and with --traffic")] = None,
    smp: Annotated[int | None, typer.Option(
        help="guest vCPUs (default 1 on the icount clock, 2 on realtime)")] = None,
    port: PortOpt = 0,
    patch: PatchOpt = None,
    traffic: Annotated[bool, typer.Option(
        "--traffic", help="the traffic variant: lan/wan NICs on taps bridged to host netns "
        "lwlan/lwwan, the guest routing lan -> wan through nftables (/etc/config/firewall), and "
        "a profile whose load section is kind = \"iperf3\" (one traffic qlab per host)")] = False,
    places: PlacesOpt = 0,
) -> None:
    """Build what is missing (image, firmware), boot the guest through labgrid (QEMUDriver +
    QlabStrategy), wait for its APs, and write lab.toml (--traffic: the router variant).
    With --places N: N qlabs (DIR/qlab-0 ...) as the places of a labgrid coordinator and exporter
    started on 127.0.0.1, and DIR/lab.toml the fleet's profile."""
    if accel not in ("auto", "kvm", "tcg"):
        fail_on(LabError(f"--accel must be auto, kvm or tcg, got {accel!r}", "e.g. --accel tcg"), 2)
    mode = cast(Literal["auto", "kvm", "tcg"], accel)  # checked just above
    if places:
        if port or traffic:
            fail("--places with --port or --traffic: a fleet's qlabs take free ports, and one "
                 "traffic qlab fits a host", "drop --port / --traffic", code=2)
        try:
            with err.status("qlab up") as st:
                finfo = fleet.up(dir, places, accel=mode, clock=clock, memory=memory, smp=smp,
                                patches=patch or [], progress=lambda m: st.update(f"qlab up: {escape(m)}"))
        except LabError as exc:
            fail_on(exc)
        show_up("qlab", dir, [
            ("fleet", finfo.root),
            ("coordinator", f"{finfo.coordinator} (labgrid; `labgrid-client -x {finfo.coordinator} places`)"),
            *((f"place {name}", f"{q.root} (ssh {q.ssh}, clock {q.clock.spec})")
              for name, q in finfo.places.items()),
            ("lab profile", finfo.lab_toml),
        ], f"labwarden lab health --lab {finfo.lab_toml}")
        return
    try:
        with err.status("qlab up") as st:
            info = control.up(dir, accel=mode, clock=clock, memory=memory, smp=smp, port=port,
                              patches=patch or [],
                              traffic_router=traffic,
                              progress=lambda m: st.update(f"qlab up: {escape(m)}"))
    except LabError as exc:
        fail_on(exc)
    show_up("qlab", dir, [
        ("state dir", info.root),
        ("guest", f"kernel {info.kernel}, image {info.image}, {info.accel.name} "
                  f"({info.accel.reason}); clock {info.clock.spec}"),
        ("ssh", f"{info.ssh} (user root; dropbear, host key pinned in the profile)"),
        ("labgrid env", info.env_yaml),
        ("lab profile", info.lab_toml),
        ("firmware", f"build {info.build_id} (nl80211 HAL)"),
        ("timings", ", ".join(f"{k} {v:.1f} s" for k, v in info.timings.items())),
    ], f"labwarden qlab status --dir {dir} --guest")


@app.command("status")
def qlab_status(dir: DirOpt = DEFAULT_QLAB_DIR,
                guest: Annotated[bool, typer.Option("--guest", help="also ask the guest")] = False,
                json_out: JsonOpt = False) -> None:
    """Whether the qlab is up (its daemon, QEMU, the strategy's state, the boot_id); for a fleet:
    the coordinator and each place's qlab."""
    if FleetDir.at(dir).is_fleet():
        fst = fleet.status(dir)
        show_fleet(fst, {name: f"{pst.root}: {pst.state}" + (f", ssh {pst.ssh}" if pst.ssh else "")
                         for name, pst in fst.places.items()}, json_out)
        return
    st = control.status(dir, ask_guest=guest)
    if json_out:
        out.print_json(st.model_dump_json())
    else:
        table = Table("what", "value", show_header=False)
        table.add_row("state", st.state + (f" ({st.error})" if st.error else ""))
        table.add_row("daemon / QEMU", f"{st.daemon_pid or '-'} / {' '.join(map(str, st.qemu_pids)) or '-'}")
        if st.ssh:
            table.add_row("ssh", st.ssh)
            table.add_row("boot_id", f"{st.boot_id} (boot {st.boots} of this daemon)")
        for key, value in st.guest.items():
            table.add_row(key, escape(value))
        out.print(table)
    if not st.up:
        raise typer.Exit(1)


@app.command("down")
def qlab_down(dir: DirOpt = DEFAULT_QLAB_DIR) -> None:
    """Power the guest off through the strategy and stop everything the qlab started. For a
    fleet (up --places): its coordinator and exporter (places, reservations) and every qlab."""
    record = FleetDir.at(dir).record()
    if record is not None:
        stopped = fleet.down(dir)
        left = [pid for root in record.places.values() for pid in control.status(root).qemu_pids]
    else:
        stopped = control.down(dir)
        left = control.status(dir).qemu_pids
    out.print(f"qlab down: stopped {len(stopped)} process(es)"
              + (f"; QEMU still running: {json.dumps(left)}" if left else ""))
    if left:
        raise typer.Exit(1)
