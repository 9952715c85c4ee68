"""Write the lab profile (lab.toml) of a qlab: the DUT is a labgrid target, reached over SSH.

With [2/2]'s driver keys: [dut] env gives every command its PATH (no login shell on the DUT);
[flash] kind = "labgrid" moves labwarden's QlabdStrategy (client-env.yaml, remote.py) to shell
with the build's image: qlabd powers the guest off, writes the image to the flash disk and boots
it. Why labgrid and not the guest's own sysupgrade: a flash must work when the DUT's userland
does not (a bench reflashes a wedged board through its programmer), and the one QEMU stays in
qlabd; sysupgrade stays one profile line away. [load] kind = "wpa_supplicant" holds real
stations through the guest's `lw-sta`; [readers] clients is the firmware's own count. The
governor/boost knobs are not applicable under QEMU (no cpufreq), so [policy] heals neither.
"""

from __future__ import annotations

import json
import re

from labwarden.lab.fleetdir import FleetProfile, fleet_labgrid_section
from labwarden.lab.host.builder import BuildManifest
from labwarden.qlab import firmware
from labwarden.qlab.clock import GuestClock
from labwarden.qlab.image import QlabImage, guest_dir
from labwarden.qlab.layout import QlabLayout
from labwarden.vlab.firmware import DEPLOY
from labwarden.vlab.profile_sections import (
    LEVERS,
    gates_section,
    lab_section,
    target_section,
    topology_section,
)
from labwarden.vlab.profile_sections import q as _q
from labwarden.vlab.profile_sections import table as _table

_TRAFFIC_DRIVES = "load_drives_cpu = false                # the load is forwarded traffic: stad's CPU " \
    "does not follow the streams (cpu_monotonic is n/a)"


def _clock_note(clock: GuestClock | None) -> str:
    if clock is None or clock.kind == "realtime":
        return ("# guest clock: realtime (QEMU's default): a guest second is a host second, so CPU% "
                "moves with the host's load")
    return (f"# guest clock: {clock.spec} (`qlab up --clock`): a guest second is 2^shift ns per "
            "instruction executed plus\n# idle skipped to the next timer; CPU% is a share of the "
            "guest's instructions, not of real seconds,\n# and does not move with the host's load")


def write(layout: QlabLayout, image: QlabImage, manifest: BuildManifest,
          load_section: str | None = None, clock: GuestClock | None = None, *,
          fleet: FleetProfile | None = None) -> None:
    """`load_section` replaces [load] and drops [readers] (the traffic variant: its load is
    traffic, not clients the firmware counts). `clock`: the guest's, noted in the header.
    `fleet`: the fleet's profile instead (to fleet.dest): the DUT reached through the fleet's
    places, flashed by the guest's own sysupgrade (each place's labgrid flash needs its own
    qlab daemon: place_profiles names each place's profile, which has it)."""
    labgrid = (fleet_labgrid_section(fleet, image.host_key) if fleet else f"""[dut.labgrid]
env = {_q(str(layout.client_env_yaml))}
target = "main"
host_key = {_q(image.host_key)}
strategy_state = "shell"
""")
    flash = ("""[flash]
# the guest flashes itself (its sysupgrade): the same on every place of the fleet
kind = "sysupgrade"
command = ["sysupgrade"]
timeout_s = 300
""" if fleet else f"""[flash]
# through the labgrid strategy of {layout.client_env_yaml.name}: qlabd powers the guest off, writes
# the build's image (packed on the host into the flash format, checked) to the flash disk, asks
# for a clean overlay and boots it (a new boot_id). It needs no working DUT, as a bench's
# programmer. kind = "sysupgrade" (command ["sysupgrade"]) makes the guest flash itself instead.
kind = "labgrid"
state = "shell"
image_key = "root"
timeout_s = 300
""")
    fleet_note = (f"# A fleet of {len(fleet.places)} qlabs ({', '.join(fleet.places)}) on the labgrid "
                  f"coordinator {fleet.coordinator}.\n" if fleet else "")
    text = f"""{fleet_note}# labwarden lab profile for the qlab in {layout.root}
# Written by `labwarden qlab up`: a Debian kernel under QEMU (labgrid target {layout.env_yaml}),
# mac80211_hwsim radios, hostapd APs, wpa_supplicant clients; a real lab differs only in this file.
{_clock_note(clock)}

{lab_section("qlab", "real", fleet.data_dir if fleet else layout.data_dir)}
[dut]
backend = "labgrid"
env = {{ PATH = "/usr/sbin:/usr/bin:/sbin:/bin" }}

{labgrid}
[dut.paths]
rootfs = "/"
# only files under usr/ shadow the firmware image; /etc/config lives in the same overlay
overlay = "/overlay/upper/usr"
config = "/etc/config"
sysfs = "/sys"
release = "/etc/openwrt_release"
tmp = "/tmp"
run = "/run"
tracefs = "/sys/kernel/tracing"

[build]
kind = "command"
repo = {_q(str(layout.src))}
builds = {_q(str(layout.builds))}
command = {json.dumps(firmware.COMMAND)}
artifacts = {_table(DEPLOY)}
patches_dirs = {json.dumps([str(d) for d in firmware.patches_dirs(layout)])}
baseline = {_q(manifest.build_id)}

{flash}
[load]
# real stations: `lw-sta assoc N` / `lw-sta release` on the DUT (wpa_supplicant in the `clients`
# netns, round-robin over the enabled VAPs, verified on both sides)
kind = "wpa_supplicant"
command = ["lw-sta"]
radios = 6
timeout_s = 240
# new stations' first syncs (a full write-back each) run for a few polls: at 114 the first 4 s
# window after associating read 59.6% against 53.3% for the rest (bench/qlab_noise.py --settle)
settle_s = 5.0

[readers]
clients = ["stacli", "--socket", "/run/stad.sock", "count"]

{target_section("/usr/lib/libsta.so", {"stad": "/run/stad.pid", "stamon": "/run/stamon.pid"},
                perf="perf")}
{topology_section(guest_dir() / "rootfs" / "etc" / "config" / "wireless", ["wifi", "reload"])}
{LEVERS}
{gates_section() if load_section is None else gates_section(_TRAFFIC_DRIVES)}
[policy]
# no cpufreq under QEMU: governor and boost are not applicable
heal = ["topology", "procmgr"]
"""
    if load_section is not None:
        text = re.sub(r"\[load\]\n.*?\n\n\[readers\]\n[^\n]*\n\n", lambda _m: load_section + "\n",
                      text, count=1, flags=re.S)
    (fleet.dest if fleet else layout.lab_toml).write_text(text)
