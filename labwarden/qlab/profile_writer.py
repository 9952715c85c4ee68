"""Write the lab profile (lab.toml) of a qlab: the DUT is a labgrid target, reached over SSH.

Drafted with today's profile schema. Where the qlab needs the second wave's driver keys, a
comment says so: [load] becomes `kind = "wpa_supplicant"` driving `lw-sta` (today's schema knows
only stasim), [flash] gains the labgrid strategy, and the governor/boost knobs are not applicable
under QEMU (no cpufreq), so [policy] heals neither.
"""

from __future__ import annotations

import json

from labwarden.lab import uci
from labwarden.lab.host.builder import BuildManifest
from labwarden.qlab import firmware
from labwarden.qlab.image import QlabImage, guest_dir
from labwarden.qlab.paths import QlabLayout
from labwarden.vlab.firmware import DEPLOY


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def write(layout: QlabLayout, image: QlabImage, manifest: BuildManifest) -> None:
    factory = uci.load(guest_dir() / "rootfs" / "etc" / "config" / "wireless")
    vaps = [s.name for s in factory if s.type == "wifi-iface"]
    channels = {s.name: s.options["channel"] for s in factory if s.type == "wifi-device"}
    text = f"""# labwarden lab profile for the qlab in {layout.root}
# Written by `labwarden qlab up`: a Debian kernel under QEMU (labgrid target {layout.env_yaml}),
# mac80211_hwsim radios, hostapd APs, wpa_supplicant clients; a real lab differs only in this file.

[lab]
name = "qlab"
kind = "real"
data_dir = {_q(str(layout.data_dir))}

[dut]
backend = "labgrid"

[dut.labgrid]
env = {_q(str(layout.env_yaml))}
target = "main"
host_key = {_q(image.host_key)}
strategy_state = "shell"

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
artifacts = {{ {", ".join(f"{_q(k)} = {_q(v)}" for k, v in DEPLOY.items())} }}
patches_dirs = {json.dumps([str(d) for d in firmware.patches_dirs(layout)])}
baseline = {_q(manifest.build_id)}

[flash]
# the image to send is the build's {firmware.IMAGE_NAME} (an ext4 image with a checked trailer);
# sysupgrade writes it to the flash disk and reboots the guest (its boot_id changes)
method = "sysupgrade"
command = ["sysupgrade"]
timeout_s = 240

[load]
# draft: the second wave's `kind = "wpa_supplicant"` runs `lw-sta assoc N` / `lw-sta release`
# on the DUT (real stations in the `clients` netns); today's schema knows only stasim
kind = "stasim"
binary = "/usr/sbin/lw-sta"
socket = "/run/stad.sock"
pidfile = "/run/lw-sta/wpa.pid"
log = "/tmp/log/lw-sta.log"
radios = 6
settle_s = 1.0

[target]
process = "stad"
library = "/usr/lib/libsta.so"
suspects = ["stamon"]
uprobes = {{ rpc_calls = "getStationStats", dm_write_txns = "dm_finalize_transaction" }}
rpc_client = "stacli"
perf = "perf"
pidfiles = {{ stad = "/run/stad.pid", stamon = "/run/stamon.pid" }}

[topology]
vaps = {json.dumps(vaps)}
channels = {{ {", ".join(f"{k} = {_q(v)}" for k, v in channels.items())} }}
reload = ["wifi", "reload"]

[levers]
trace_config = "trace"
trace_reload = ["service", "stad", "restart"]
monitor_config = "stamon"
monitor_reload = ["service", "stamon", "restart"]

[gates]
unknown_frames_pct_max = 1.0
rss_per_client_kb_max = 64.0

[policy]
# no cpufreq under QEMU: governor and boost are not applicable
heal = ["topology", "procmgr"]
"""
    layout.lab_toml.write_text(text)
