"""Write the lab profile (lab.toml) of a vlab: a real lab differs only in this file."""

from __future__ import annotations

import json

from labwarden.lab.fleetdir import FleetProfile, fleet_labgrid_section
from labwarden.vlab import firmware, tuning
from labwarden.vlab.layout import SERVICES, VlabLayout
from labwarden.vlab.profile_sections import (
    LEVERS,
    gates_section,
    lab_section,
    target_section,
    topology_section,
)
from labwarden.vlab.profile_sections import q as _q
from labwarden.vlab.profile_sections import table as _table

PROTECTED = ["stamon.c", "stasim.c", "stacli.c", "measure.sh", "costs.h", "work.c", "work.h"]
"""What a submitted patch may not touch on the vlab: the monitor (the offered load), the load
side, the RPC client measurements query the datamodel with, the dev-machine measurement script,
and the calibrated work loop with its costs (the vlab's physics: lowering a cost is not a fix)."""
PROTECTED_ARTIFACTS = ["stamon", "stasim", "stacli"]
"""The monitor, the load side and the RPC client the measurements use: their code is the
workload's, whatever route (a source, a header, a build rule) would change it."""

PARITY_CHECK = r"""S=$1
first() { printf '%s\n' "$1" | head -n 1; }
keys() { first "$1" | tr ' ' '\n' | cut -d= -f1 | tr '\n' ' '; }
full=$(stacli --socket "$S" getStationStats vap0) || { echo "full: ERR"; exit 1; }
echo "full keys: $(keys "$full")"
if brief=$(stacli --socket "$S" getStationStatsBrief vap0 2>/dev/null); then
  echo "brief keys: $(keys "$brief")"
  same=no i=0
  while [ "$i" -lt 3 ] && [ "$same" = no ]; do
    b=$(stacli --socket "$S" getStationStatsBrief vap0) f=$(stacli --socket "$S" getStationStats vap0)
    same=$(printf '%s\n%s\n' "$(first "$b")" "$(first "$f")" | awk '
      NR == 1 { for (i = 1; i <= NF; i++) { split($i, kv, "="); want[kv[1]] = kv[2] } }
      NR == 2 { ok = "yes"; n = 0
                for (i = 1; i <= NF; i++) { split($i, kv, "=")
                  if (kv[1] in want) { n++; if (want[kv[1]] != kv[2]) ok = "no" } }
                print (n > 0 ? ok : "no") }')
    i=$((i + 1))
  done
  echo "brief values equal the full reply's: $same"
else
  echo "brief: not served"
fi"""
"""The vlab's functional parity check (POSIX sh on the DUT, the socket as $1): the keys of the
full stats reply, and -- when the image serves getStationStatsBrief -- the brief reply's keys and
whether its values equal the full reply's (asked up to 3 times: a second boundary between the
two calls moves the counters). A and B must print the same."""


def write(layout: VlabLayout, info_port: int, manifest: firmware.BuildManifest, *,
          fleet: FleetProfile | None = None) -> None:
    """The vlab's lab.toml; with `fleet`, the fleet's profile instead (written to fleet.dest):
    the DUT reached through the fleet's labgrid places, this vlab's paths as the first place's."""
    r = layout.root
    with open(str(layout.host_key) + ".pub") as f:
        host_key_line = f.read().strip()
    if fleet is None:
        header = f"# labwarden lab profile for the virtual lab in {r}"
        reach = f"""backend = "ssh"
# every DUT command gets this environment (no login shell runs, so nothing else sets PATH)
env = {{ {", ".join(f"{k} = {_q(v)}" for k, v in layout.dut_env().items() if k != "HOME")} }}

[dut.ssh]
host = "127.0.0.1"
port = {info_port}
user = "root"
key = {_q(str(layout.client_key))}
host_key = {_q(host_key_line)}
"""
    else:
        header = (f"# labwarden lab profile for a fleet of {len(fleet.places)} vlabs in {fleet.dest.parent}, "
                  f"one labgrid place each\n# (coordinator {fleet.coordinator}); the paths below are "
                  f"{fleet.places[0]}'s, place_profiles has each place's own")
        reach = f"""backend = "labgrid"
env = {{ {", ".join(f"{k} = {_q(v)}" for k, v in layout.dut_env().items() if k != "HOME")} }}

{fleet_labgrid_section(fleet, host_key_line)}"""
    text = f"""{header}
# Written by `labwarden vlab up`; a real lab differs only in this file.

{lab_section("vlab", "vlab", fleet.data_dir if fleet else layout.data_dir)}
[dut]
{reach}
[dut.paths]
root = {_q(str(r))}
rootfs = {_q(str(layout.rootfs))}
overlay = {_q(str(layout.overlay))}
config = {_q(str(layout.config_dir))}
sysfs = {_q(str(layout.sysfs))}
release = {_q(str(layout.openwrt_release))}
tmp = {_q(str(layout.tmp_dir))}
run = {_q(str(layout.run_dir))}

[build]
kind = "vlab"
repo = {_q(str(layout.src))}
builds = {_q(str(layout.builds))}
command = {json.dumps(firmware.COMMAND)}
artifacts = {_table(firmware.DEPLOY)}
extra_outputs = {json.dumps(firmware.LOADGEN)}
patches_dirs = {json.dumps([str(d) for d in firmware.patches_dirs(layout)])}
baseline = {_q(manifest.build_id)}
protected = {json.dumps(PROTECTED)}
protected_artifacts = {json.dumps(PROTECTED_ARTIFACTS)}

[flash]
kind = "vlab"
command = ["sysupgrade"]
timeout_s = 60

[load]
kind = "stasim"
binary = {_q(str(layout.loadgen / "stasim"))}
socket = {_q(str(layout.socket))}
pidfile = {_q(str(layout.stasim_pid))}
log = {_q(str(layout.logs / "stasim.log"))}
radios = 6
# stamon polls every 1 s (interval_ms in its uci config): one interval puts every new client
# in the steady cycle (measured: the first 1 s sample after associating is ~30% low, not after)
settle_s = 1.0

{target_section(str(layout.rootfs / "usr" / "lib" / "libsta.so"),
                {n: str(layout.run_dir / (n + ".pid")) for n in SERVICES})}
[readers]
clients = ["stacli", "--socket", {_q(str(layout.socket))}, "count"]

{topology_section(tuning.factory_config_dir() / "wireless", ["service", "stad", "restart"])}
{LEVERS}
{gates_section()}
[decision]
# pre-registered: how an experiment decides (bench/decision.py measures its error rates)
alpha = 0.02
# a false "same" (an effect of exactly min_effect_pct missed) is cheaper than a false "improved"
beta = 0.1
min_effect_pct = 5.0
min_windows = 3
step_windows = 2
max_windows = 15
window_s = 4.0
# the gated write-back (0901) still rewrites every client once after association: wait it out
settle_s = 3.0
densities = [18, 60, 114]
sweep_reps = 3
# A and B alternate when a flash + verify (measured: ~1 s here, two processes restarted)
# costs no more than the windows a round adds
interleave = "auto"
offered_load_counter = "rpc_calls"
offered_load_tolerance_pct = 5.0
parity_check = {json.dumps(["sh", "-c", PARITY_CHECK, "lw-parity", str(layout.socket)])}

[policy]
heal = ["governor", "boost", "topology", "procmgr"]
"""
    (fleet.dest if fleet else layout.lab_toml).write_text(text)
